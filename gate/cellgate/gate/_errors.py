"""Errors of the host side of cellgate.

::

    CellgateError
    ├── ConfigError(ValueError)        a cellgate.toml or tool module is malformed
    │   ├── ArtifactError              an audit artifact (notebook, journal, blob) is unsafe or malformed
    │   └── RecordExists               a new session's notebook path holds an earlier session's record
    ├── SandboxUnavailable(RuntimeError)  gVisor (runsc) is missing or unusable: fail closed
    ├── SandboxError(RuntimeError)     the sandbox failed to start or misbehaved
    ├── SessionError(RuntimeError)     a session operation could not be done
    │   ├── KernelDied                 the sandboxed kernel died or was killed
    │   ├── FileTooLarge               an upload or download over [sandbox] file_limit_mb
    │   ├── FileRefused                a file path or transfer the sandbox refused or the host did not accept
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


class FileTooLarge(SessionError):
    """A file moved in or out of the sandbox is over ``[sandbox] file_limit_mb``; nothing of it was written."""

    code: Literal["file-too-large"] = "file-too-large"

    def __init__(self, message: str, *, path: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.path, self.size, self.limit = path, size, limit


class FileRefused(SessionError):
    """A file path or transfer was refused (outside the workspace, missing, malformed); nothing was recorded."""

    code: Literal["file-refused"] = "file-refused"


class SourceUnavailable(CellgateError, RuntimeError):
    """Raised by a tool's function when its source cannot serve the call: the cell gets ToolUnavailable."""

    code: Literal["source-unavailable"] = "source-unavailable"


class ArtifactError(ConfigError):
    """A file a run folder names cannot be read safely (unsafe or malformed)."""


class RecordExists(ConfigError):
    """The audit notebook path a session was given already holds a record (``path``): it is never written over."""

    def __init__(self, message: str, path: object) -> None:
        super().__init__(message)
        self.path = path


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
    "RecordExists",
    "CellgateError",
    "ConfigError",
    "SandboxUnavailable",
    "SandboxError",
    "SessionError",
    "KernelDied",
    "FileRefused",
    "FileTooLarge",
    "SourceUnavailable",
]
