"""The host side of cellgate: sandbox launcher, gate, recorder, Session and CLI.

Public API::

    from cellgate.gate import Session, CellResult, Tool, ToolRegistry, Settings
"""

from .config import Settings, load_settings
from .gate import Secret
from .errors import CellgateError, ConfigError, KernelDied, SandboxError, SandboxUnavailable, SessionError
from .pool import Pool, PoolExhausted
from .session import CellResult, Session
from .tools import Tool, ToolRegistry, tool_from_function

__all__ = [
    "CellResult",
    "CellgateError",
    "ConfigError",
    "KernelDied",
    "Pool",
    "PoolExhausted",
    "SandboxError",
    "SandboxUnavailable",
    "Secret",
    "Session",
    "SessionError",
    "Settings",
    "Tool",
    "ToolRegistry",
    "load_settings",
    "tool_from_function",
]
