"""Exceptions raised inside a cell when a gated tool call does not return a result.

::

    ToolError                      the tool ran and failed (carries the tool's message)
    ├── ToolNotFound(LookupError)  no tool of that name in this session
    ├── ToolValidationError(ValueError)  arguments rejected before the tool ran
    ├── ToolDenied(PermissionError)      refused by policy
    ├── ToolBudgetExceeded         a call budget is exhausted
    ├── ToolRateLimited            a rate limit refused the call
    ├── ToolTimeout(TimeoutError)  no answer within the deadline
    ├── ToolUnavailable            the gate could not serve the call at all
    └── ReplayDivergence           replay: a call the recording does not have

Every instance carries ``tool`` and a stable ``kind`` (see ``wire.ErrorKind``),
so code in the cell never needs to parse messages.
"""

from __future__ import annotations

from .wire import ERROR_KINDS, ErrorKind


class ToolError(Exception):
    """A gated tool call did not return a result; ``kind`` says why."""

    kind: ErrorKind = "failed"

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.message = message


class ToolNotFound(ToolError, LookupError):
    kind: ErrorKind = "not_found"


class ToolValidationError(ToolError, ValueError):
    kind: ErrorKind = "invalid"


class ToolDenied(ToolError, PermissionError):
    kind: ErrorKind = "denied"


class ToolBudgetExceeded(ToolError):
    kind: ErrorKind = "budget"


class ToolRateLimited(ToolError):
    kind: ErrorKind = "rate_limited"


class ToolTimeout(ToolError, TimeoutError):
    kind: ErrorKind = "timeout"


class ToolUnavailable(ToolError):
    kind: ErrorKind = "unavailable"


class ReplayDivergence(ToolError):
    kind: ErrorKind = "divergence"


_BY_KIND: dict[str, type[ToolError]] = {
    "failed": ToolError,
    "not_found": ToolNotFound,
    "invalid": ToolValidationError,
    "denied": ToolDenied,
    "budget": ToolBudgetExceeded,
    "rate_limited": ToolRateLimited,
    "timeout": ToolTimeout,
    "no_cell": ToolUnavailable,
    "unavailable": ToolUnavailable,
    "divergence": ReplayDivergence,
}


def error_for(kind: str, tool: str, message: str) -> ToolError:
    """The exception for an error reply; an unknown kind is a plain ``ToolError``."""
    error = _BY_KIND.get(kind, ToolError)(tool, message)
    if kind in ERROR_KINDS:
        error.kind = kind  # type: ignore[assignment]  # e.g. "no_cell" on a ToolUnavailable
    return error


__all__ = [
    "ToolError",
    "ToolNotFound",
    "ToolValidationError",
    "ToolDenied",
    "ToolBudgetExceeded",
    "ToolRateLimited",
    "ToolTimeout",
    "ToolUnavailable",
    "ReplayDivergence",
    "error_for",
]
