"""Errors of the host side of cellgate.

::

    CellgateError
    ├── ConfigError(ValueError)        a cellgate.toml or tool module is malformed
    │   └── ArtifactError              an audit artifact (notebook, journal, blob) is unsafe or malformed
    ├── SandboxUnavailable(RuntimeError)  gVisor (runsc) is missing or unusable: fail closed
    ├── SandboxError(RuntimeError)     the sandbox failed to start or misbehaved
    ├── SessionError(RuntimeError)     a session operation could not be done
    │   ├── KernelDied                 the sandboxed kernel died or was killed
    │   └── PoolExhausted              no sandbox of the pool became free in time
    ├── SourceUnavailable(RuntimeError)  a tool source (e.g. an MCP server) cannot serve a call
    ├── JournalError(OSError)          the journal could not be written: no further side effects may run
    └── ProtocolError(ValueError)      a malformed message or request from the sandbox

Each carries a stable ``code`` so callers never parse messages.
"""

from __future__ import annotations

from typing import Literal


class CellgateError(Exception):
    code: str = "cellgate"


class ConfigError(CellgateError, ValueError):
    code: Literal["config"] = "config"


class SandboxUnavailable(CellgateError, RuntimeError):
    code: Literal["sandbox-unavailable"] = "sandbox-unavailable"


class SandboxError(CellgateError, RuntimeError):
    code: Literal["sandbox"] = "sandbox"


class SessionError(CellgateError, RuntimeError):
    code: str = "session"


class KernelDied(SessionError):
    code: Literal["kernel-died"] = "kernel-died"


class SourceUnavailable(CellgateError, RuntimeError):
    """Raised by a tool's function when its source cannot serve the call: the cell gets ToolUnavailable."""

    code: Literal["source-unavailable"] = "source-unavailable"


class ArtifactError(ConfigError):
    """A file a run folder names cannot be read safely (unsafe or malformed)."""


class PoolExhausted(SessionError):
    code = "pool-exhausted"


class JournalError(CellgateError, OSError):
    """The journal could not be written: no further side effects may run."""

    code: Literal["journal"] = "journal"


class ProtocolError(CellgateError, ValueError):
    """A malformed message or request from the sandbox."""

    code: Literal["protocol"] = "protocol"


__all__ = [
    "ArtifactError",
    "JournalError",
    "PoolExhausted",
    "ProtocolError",
    "CellgateError",
    "ConfigError",
    "SandboxUnavailable",
    "SandboxError",
    "SessionError",
    "KernelDied",
    "SourceUnavailable",
]
