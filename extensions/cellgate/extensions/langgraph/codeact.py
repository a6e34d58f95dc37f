"""``CodeActEval``: langgraph-codeact's ``eval_fn`` on a cellgate session.

``create_codeact(model, tools, eval_fn)`` hands ``eval_fn(script, context)`` the tools' host functions in
``context``. They are not run there: each is added to the session as a host tool (once; a tool the session
already has is used as it is), the sandbox binds its name to the stub, and the script runs as one cell in the
gVisor kernel, every call gated and recorded. The kernel keeps the script's variables between steps, so the new
variables handed back to the graph's state are none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cellgate.gate import SyncSession, Tool

from .binding import binding_code, cell_text, restarted


class CodeActEval:
    """``create_codeact(model, tools, eval_fn=CodeActEval(box))``: ``box`` a started ``SyncSession``."""

    def __init__(self, session: SyncSession) -> None:
        self.session = session
        self._bound: frozenset[str] = frozenset()

    def __call__(self, script: str, context: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        tools = {name: value for name, value in context.items() if callable(value)}
        self._add(tools)
        if set(tools) - self._bound:
            bound = self.session.execute(binding_code(tools))
            if not bound.ok:
                return f"binding the tools' names in the sandbox failed: {cell_text(bound)}", {}
            self._bound = frozenset(tools)
        result = self.session.execute(script)
        if restarted(result):
            self._bound = frozenset()  # bound again before the next script
        return cell_text(result), {}

    def _add(self, tools: dict[str, Callable[..., Any]]) -> None:
        have = {entry["name"] for entry in self.session.session.manifest}
        fresh = [Tool.from_function(function, name=name, source="langgraph-codeact")
                 for name, function in tools.items() if name not in have]
        if fresh:
            self.session.add_tools(*fresh)
