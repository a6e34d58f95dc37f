"""pydantic-ai's code mode on cellgate (``pip install 'cellgate[pydantic-ai]'``).

``CellgateCodeMode(toolset)`` is a pydantic-ai toolset that shows the model one tool, ``run_code``: the code runs
as a cell of a cellgate session (CPython in gVisor), where each wrapped tool is a top-level ``async def`` of the
same name. A call from the sandbox goes through the gate (policy, audit notebook) and then runs on the host as
the wrapped toolset's own call, with the agent run's ``RunContext``, so the tools get their ``deps``.
"""

from __future__ import annotations

from .toolset import CellgateCodeMode

__all__ = ["CellgateCodeMode"]
