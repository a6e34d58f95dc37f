"""Exceptions raised inside a cell when a gated tool call does not return a result.

::

    ToolError                      the tool ran and failed (carries the tool's message)
    ├── ToolNotFound(LookupError, AttributeError)  no tool of that name in this session
    ├── ToolValidationError(ValueError)  arguments rejected before the tool ran
    ├── ToolDenied(PermissionError)      refused by policy
    ├── ToolBudgetExceeded         a call budget is exhausted
    ├── ToolRateLimited            a rate limit refused the call
    ├── ToolTimeout(TimeoutError)  no answer within the deadline
    ├── ToolUnavailable            the gate could not serve the call at all
    ├── OutcomeUnknown             retry: an earlier attempt's write of unknown outcome, not run again
    └── ReplayDivergence           replay: a call the recording does not have

Every instance carries ``tool`` and a stable ``kind`` (see ``wire.ErrorKind``),
so code in the cell never needs to parse messages.

A failed call reads like any Python error: its traceback, as IPython, the
``traceback`` module and a ``raise ... from`` chain read it, ends at the code
that called the tool. The generated stub's frame and the runtime's below it
are machinery; the interpreter keeps them (``sys.exc_info()``, ``%debug``).
"""

from __future__ import annotations

import sys
import traceback
from types import FrameType, TracebackType
from typing import Any, Final

from .wire import ERROR_KINDS, ErrorKind

RUNTIME_MODULE = "cellgate.kernel.runtime"
# The interpreter's own slot, which ``raise`` and ``sys.exc_info()`` use.
_TRACEBACK_SLOT: Final[Any] = BaseException.__dict__["__traceback__"]


class ToolError(Exception):
    """A gated tool call did not return a result; ``kind`` says why."""

    kind: ErrorKind = "failed"

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.message = message

    # Python-level readers (IPython's chained tracebacks, the traceback module) see the caller's frames only.
    @property
    def __traceback__(self) -> TracebackType | None:
        return callers_part(_TRACEBACK_SLOT.__get__(self))

    @__traceback__.setter
    def __traceback__(self, value: TracebackType | None) -> None:
        _TRACEBACK_SLOT.__set__(self, value)

    def _render_traceback_(self) -> list[str]:
        """IPython's hook for an exception that formats itself: its usual traceback, of the caller's frames."""
        try:
            from IPython import get_ipython

            shell = get_ipython()
            if shell is not None:
                return list(shell.InteractiveTB.structured_traceback(type(self), self, self.__traceback__))
        except Exception:  # noqa: BLE001, S110 - never fail the display of the error itself
            pass
        return "".join(traceback.format_exception(self)).splitlines()


class ToolNotFound(ToolError, LookupError, AttributeError):
    """Also an AttributeError: ``tools.x`` for a tool the session lacks raises it, and ``hasattr`` still works."""

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


class ToolBusy(ToolError):
    """The gate was busy: no slot of the tool freed within its queue bound, and the call was not run. Retrying
    later is safe."""

    kind: ErrorKind = "busy"


class OutcomeUnknown(ToolError):
    """A retry (``Session.execute(code, retry=True)``) reached a write that an earlier attempt started and whose
    outcome is unknown (its deadline passed, the host stopped), and the tool takes no idempotency key: it was not
    run again. Look first (a read), then write if it is missing."""

    kind: ErrorKind = "outcome_unknown"


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
    "busy": ToolBusy,
    "no_cell": ToolUnavailable,
    "unavailable": ToolUnavailable,
    "divergence": ReplayDivergence,
    "outcome_unknown": OutcomeUnknown,
}


def _machinery(frame: FrameType) -> bool:
    """A frame of the tools runtime, or of a generated stub (the ``tools`` package, importing it as ``_runtime``)."""
    runtime = sys.modules.get(RUNTIME_MODULE)
    module = frame.f_globals.get("__name__")
    if runtime is None or not isinstance(module, str):
        return False
    stubs = module == "tools" or module.startswith("tools.")
    return module == RUNTIME_MODULE or (stubs and frame.f_globals.get("_runtime") is runtime)


def callers_part(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` up to the first stub or runtime frame (a new chain); unchanged if it has no caller's frame."""
    kept: list[TracebackType] = []
    entry = tb
    while entry is not None and not _machinery(entry.tb_frame):
        kept.append(entry)
        entry = entry.tb_next
    if entry is None or not kept:
        return tb
    trimmed: TracebackType | None = None
    for kept_entry in reversed(kept):
        trimmed = TracebackType(trimmed, kept_entry.tb_frame, kept_entry.tb_lasti, kept_entry.tb_lineno)
    return trimmed


def error_for(kind: str, tool: str, message: str) -> ToolError:
    """The exception for an error reply; an unknown kind is a plain ``ToolError``."""
    error = _BY_KIND.get(kind, ToolError)(tool, message)
    if kind in ERROR_KINDS:
        error.kind = kind  # type: ignore[assignment]  # e.g. "no_cell" on a ToolUnavailable
    return error


__all__ = [
    "OutcomeUnknown",
    "ReplayDivergence",
    "ToolBudgetExceeded",
    "ToolBusy",
    "ToolDenied",
    "ToolError",
    "ToolNotFound",
    "ToolRateLimited",
    "ToolTimeout",
    "ToolUnavailable",
    "ToolValidationError",
    "error_for",
]
