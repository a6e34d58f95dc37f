"""The host side of cellgate: sandbox launcher, gate, recorder, Session and CLI.

The public face, what a program that runs agent code in cellgate imports::

    from cellgate.gate import Session, SyncSession, CellResult, Tool, ToolRegistry, Settings

Sessions (``Session``, ``Pool``, ``CellResult``), the tools a session offers (``Tool``, ``ToolRegistry``,
``Secret``), the configuration (``Settings``, ``load_settings``) and the errors, each a ``CellgateError`` with a
stable ``code``. Nothing else here is public: the rooms behind the face (``cellgate.gate.session``, ``.calls``,
``.audit``, ``.sandbox``, ...) move without notice. Extension authors (tool sources, config sections, sandbox
backends, agent loops, review servers) import ``cellgate.gate.ext`` as well, and only these two modules
(import-linter contracts).

The face is lazy: importing it (or a room such as ``cellgate.gate.calls.policy``) does not import
jupyter_client or the Session, so the CLI's light commands start fast.
"""

from __future__ import annotations

import importlib as _importlib
from collections.abc import Callable as _Callable
from collections.abc import Mapping as _Mapping
from typing import TYPE_CHECKING
from typing import Any as _Any

if TYPE_CHECKING:  # the names for type checkers; at run time the face imports them lazily
    from cellgate.gate._errors import (
        CellgateError,
        ConfigError,
        KernelDied,
        PoolExhausted,
        RecordExists,
        SandboxError,
        SandboxUnavailable,
        SessionError,
        SourceUnavailable,
    )
    from cellgate.gate.calls.dispatch import Secret
    from cellgate.gate.calls.registry import Tool, ToolRegistry
    from cellgate.gate.config import Settings, load_settings
    from cellgate.gate.session.commands import CommandResult
    from cellgate.gate.session.files import FileRecord
    from cellgate.gate.session.pool import Pool
    from cellgate.gate.session.session import CellResult, Session
    from cellgate.gate.session.sync import SyncSession

# name on the face -> "module" (same name there) or "module:name"
_FACE = {
    "CellResult": "cellgate.gate.session.session",
    "Pool": "cellgate.gate.session.pool",
    "Session": "cellgate.gate.session.session",
    "CommandResult": "cellgate.gate.session.commands",
    "FileRecord": "cellgate.gate.session.files",
    "Secret": "cellgate.gate.calls.dispatch",
    "Tool": "cellgate.gate.calls.registry",
    "ToolRegistry": "cellgate.gate.calls.registry",
    "Settings": "cellgate.gate.config",
    "load_settings": "cellgate.gate.config",
    "CellgateError": "cellgate.gate._errors",
    "ConfigError": "cellgate.gate._errors",
    "KernelDied": "cellgate.gate._errors",
    "PoolExhausted": "cellgate.gate._errors",
    "RecordExists": "cellgate.gate._errors",
    "SandboxError": "cellgate.gate._errors",
    "SandboxUnavailable": "cellgate.gate._errors",
    "SessionError": "cellgate.gate._errors",
    "SyncSession": "cellgate.gate.session.sync",
    "SourceUnavailable": "cellgate.gate._errors",
}

__all__ = [
    "CellResult", "CommandResult", "FileRecord", "Pool", "Session",  # sessions, their commands and files
    "Secret", "Tool", "ToolRegistry",  # the tools a session offers
    "Settings", "load_settings",  # configuration (a Session finds cellgate.toml itself: Session(config=...))
    "CellgateError", "ConfigError", "KernelDied", "PoolExhausted", "RecordExists", "SandboxError",  # errors
    "SandboxUnavailable", "SessionError", "SourceUnavailable",
    "SyncSession",  # the library API of issue #31 (the face stays at 20 names or fewer)
]
assert sorted(__all__) == sorted(_FACE)


def _lazy(module: str, names: _Mapping[str, str], namespace: dict[str, _Any]) -> _Callable[[str], _Any]:
    """A module ``__getattr__`` that imports each of ``names`` on first use and keeps it in ``namespace``."""

    def __getattr__(name: str) -> _Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        source, _, attribute = where.partition(":")
        value = getattr(_importlib.import_module(source), attribute or name)
        namespace[name] = value
        return value

    return __getattr__


# Hidden from type checkers, which see the imports above: a name that is not there is an error for them too.
if not TYPE_CHECKING:
    __getattr__ = _lazy(__name__, _FACE, globals())


def __dir__() -> list[str]:
    # The face, not the module's helpers or the rooms imported so far (a package's submodules become attributes).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
