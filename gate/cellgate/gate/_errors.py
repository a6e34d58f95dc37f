"""Errors of the host side of cellgate.

::

    CellgateError
    ├── ConfigError(ValueError)        a cellgate.toml or tool module is malformed
    ├── SandboxUnavailable(RuntimeError)  gVisor (runsc) is missing or unusable: fail closed
    ├── SandboxError(RuntimeError)     the sandbox failed to start or misbehaved
    ├── SessionError(RuntimeError)     a session operation could not be done
    │   └── KernelDied                 the sandboxed kernel died or was killed
    └── SourceUnavailable(RuntimeError)  a tool source (e.g. an MCP server) cannot serve a call

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


__all__ = [
    "CellgateError",
    "ConfigError",
    "SandboxUnavailable",
    "SandboxError",
    "SessionError",
    "KernelDied",
    "SourceUnavailable",
]
