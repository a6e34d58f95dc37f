"""What the dispatcher tells an observer of its calls (``cellgate.gate.telemetry.Telemetry`` is one).

The calls room says what it tells; the session's telemetry, above it, listens. So the dispatcher imports no
observer, and ``telemetry`` imports this module only (one way: import-linter's contracts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from cellgate.gate.calls.record import CallRecord

F = TypeVar("F", bound=Callable[..., Any])


class CallSpan:
    """One gated call as an observer follows it; this one does nothing."""

    def ids(self) -> dict[str, str] | None:
        """The trace and span id the journal records with the call (None: not traced)."""
        return None

    def inside(self, function: F) -> F:
        """``function`` (a coroutine function), made to run in the call's trace context, so that a tool's own
        instrumented client continues the trace. The dispatcher wraps deciding and running the call with it."""
        return function

    def ended(self, record: CallRecord) -> None:
        """The call is decided and done (``record`` as the journal keeps it). Called once, by the dispatcher."""


NO_CALL = CallSpan()


class CallObserver(Protocol):
    """Told of the dispatcher's calls (``Dispatcher.telemetry``)."""

    def call_started(self, cell: object, tool: str, call_id: str, origin: str) -> CallSpan: ...

    def approvals_waiting(self, tool: str, change: int) -> None: ...


class NoObserver:
    """The dispatcher's observer until the session sets one: it follows nothing."""

    def call_started(self, cell: object, tool: str, call_id: str, origin: str) -> CallSpan:
        return NO_CALL

    def approvals_waiting(self, tool: str, change: int) -> None:
        pass


NO_OBSERVER = NoObserver()

__all__ = ["NO_CALL", "NO_OBSERVER", "CallObserver", "CallSpan", "NoObserver"]
