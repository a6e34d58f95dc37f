"""The host side of cellgate: sandbox launcher, gate, recorder, Session and CLI.

Public API::

    from cellgate.gate import Session, CellResult, Tool, ToolRegistry, Settings

The face is lazy: importing a room (``cellgate.gate.calls.policy``) does not
import jupyter_client or the Session, so the CLI's light commands start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names for type checkers; at run time the face imports them lazily
    from cellgate.gate._errors import (
        CellgateError,
        ConfigError,
        KernelDied,
        SandboxError,
        SandboxUnavailable,
        SessionError,
    )
    from cellgate.gate.calls.dispatch import Secret
    from cellgate.gate.calls.registry import Tool, ToolRegistry, tool_from_function
    from cellgate.gate.config import Settings, load_settings
    from cellgate.gate.session.pool import Pool, PoolExhausted
    from cellgate.gate.session.session import CellResult, Session

_FACE = {
    "CellResult": "cellgate.gate.session.session",
    "CellgateError": "cellgate.gate._errors",
    "ConfigError": "cellgate.gate._errors",
    "KernelDied": "cellgate.gate._errors",
    "Pool": "cellgate.gate.session.pool",
    "PoolExhausted": "cellgate.gate.session.pool",
    "SandboxError": "cellgate.gate._errors",
    "SandboxUnavailable": "cellgate.gate._errors",
    "Secret": "cellgate.gate.calls.dispatch",
    "Session": "cellgate.gate.session.session",
    "SessionError": "cellgate.gate._errors",
    "Settings": "cellgate.gate.config",
    "Tool": "cellgate.gate.calls.registry",
    "ToolRegistry": "cellgate.gate.calls.registry",
    "load_settings": "cellgate.gate.config",
    "tool_from_function": "cellgate.gate.calls.registry",
}

__all__ = [
    "CellResult", "CellgateError", "ConfigError", "KernelDied", "Pool", "PoolExhausted", "SandboxError",
    "SandboxUnavailable", "Secret", "Session", "SessionError", "Settings", "Tool", "ToolRegistry", "load_settings",
    "tool_from_function",
]
assert sorted(__all__) == sorted(_FACE)


def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'cellgate.gate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
