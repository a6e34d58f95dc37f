"""smolagents on cellgate (``pip install 'cellgate[smolagents]'``; docs: integrations/smolagents).

``CellgateExecutor`` is a smolagents remote executor: ``CodeAgent``'s code runs in the gVisor kernel and the
agent's tools run on the host, each call gated and recorded.
"""

from __future__ import annotations

from .executor import CellgateExecutor, PackagesUnavailable

__all__ = ["CellgateExecutor", "PackagesUnavailable"]
