"""LangGraph on cellgate: langgraph-codeact's ``eval_fn`` and a deepagents sandbox backend (docs: integrations/langgraph).

- ``CodeActEval`` (``pip install 'cellgate[langgraph-codeact]'``): ``create_codeact(model, tools, CodeActEval(box))``
  runs each script in the gVisor kernel; the agent's tools are gated host tools.
- ``CellgateSandbox`` and ``python_tool`` (``pip install 'cellgate[deepagents]'``): a deepagents ``BaseSandbox``
  (``execute`` is ``run_command``, files move with ``upload``/``download``), and a tool that runs Python in the
  kernel, where the session's tools are.

The two need different versions of langgraph (langgraph-codeact 0.1 pins langgraph below 0.4, deepagents 0.7 needs
1.x), so each submodule imports only its own framework, when it is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .codeact import CodeActEval
    from .deepagents import CellgateSandbox, python_tool

_NAMES = {"CodeActEval": ".codeact", "CellgateSandbox": ".deepagents", "python_tool": ".deepagents"}
__all__ = ["CellgateSandbox", "CodeActEval", "python_tool"]
assert sorted(__all__) == sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name], __name__), name)
