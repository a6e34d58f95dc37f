"""The recorded calls of a run, summarised: pure functions every view of a run shares.

Each function takes calls as the audit notebook lists them (``metadata.cellgate.calls``
of a cell, see ``calls.record.CallRecord.as_metadata``) and never trusts their shape:
a notebook someone hands the CLI is hostile, so a missing or mistyped field reads as
unknown, never as an exception. What these return is plain data; the views show it
through ``_terminal`` (a terminal, HTML, JSON).

The outcome of a call is one of a closed set (``Outcome``): what happened, from the
gate's decision and the call's error together. A call refused before any rule was
looked at (arguments that fail the tool's schema, a tool that does not exist) is
``invalid`` or ``not-found``, not ``denied-by-rule``, whatever ``decision`` says.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final, Literal, get_args

from cellgate.kernel.errors import error_for

Outcome = Literal[
    "allowed",  # allowed by a rule, ran, returned
    "approved",  # a rule asked for approval, an approver said yes, ran, returned
    "replayed",  # answered from a recording (cellgate replay)
    "denied-by-rule",  # a policy rule refused it
    "denied-by-approver",  # the approver said no
    "approval-timeout",  # no answer from the approver in time
    "approval-withdrawn",  # its cell ended while it waited for approval
    "over-budget",  # a call budget was spent
    "rate-limited",  # a rate limit refused it
    "invalid",  # arguments failed the tool's schema (or a malformed request)
    "not-found",  # no such tool
    "error",  # the tool ran and failed
    "timeout",  # the tool did not answer within its deadline
    "unavailable",  # the gate could not serve it (e.g. its journal could not be written)
    "divergence",  # replay: a call the recording does not have
    "unknown",  # the host stopped mid-call: it may or may not have taken effect
    "running",  # started, not finished when the notebook was written
]
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)
FAILURES: Final = frozenset(OUTCOMES) - {"allowed", "approved", "replayed", "running"}
LABELS: Final[dict[Outcome, str]] = {
    "allowed": "allowed", "approved": "approved", "replayed": "replayed", "denied-by-rule": "denied by rule",
    "denied-by-approver": "denied by approver", "approval-timeout": "approval timed out",
    "approval-withdrawn": "approval withdrawn", "over-budget": "over budget", "rate-limited": "rate limited",
    "invalid": "invalid arguments", "not-found": "no such tool", "error": "tool error", "timeout": "timed out",
    "unavailable": "unavailable", "divergence": "replay divergence", "unknown": "unknown (reconcile)",
    "running": "still running",
}
_BY_DECISION: Final[dict[str, Outcome]] = {
    "approval-denied": "denied-by-approver", "approval-timeout": "approval-timeout",
    "approval-withdrawn": "approval-withdrawn"}
_BY_KIND: Final[dict[str, Outcome]] = {
    "invalid": "invalid", "not_found": "not-found", "budget": "over-budget", "rate_limited": "rate-limited",
    "denied": "denied-by-rule", "failed": "error", "timeout": "timeout", "unavailable": "unavailable",
    "no_cell": "unavailable", "divergence": "divergence", "unknown": "unknown"}
MAX_TIME_TEXT = 64  # a timestamp longer than this is not one


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def text_of(value: Any) -> str:
    """A recorded string, or '' for anything else."""
    return value if isinstance(value, str) else ""


def number(value: Any) -> float | None:
    """A recorded finite, non-negative number (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def count(value: Any) -> int:
    """A recorded count (an int, not a bool), or 0 for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def error_kind(call: Mapping[str, Any]) -> str:
    return text_of(as_dict(call.get("error")).get("kind"))


def outcome(call: Mapping[str, Any]) -> Outcome:
    """What happened to a call (see ``Outcome``)."""
    if call.get("outcome") == "started":
        return "running"
    decision = call.get("decision")
    if call.get("ok") is True:
        return {"approved": "approved", "replayed": "replayed"}.get(str(decision), "allowed")  # type: ignore[return-value]
    kind = error_kind(call)
    if kind in ("invalid", "not_found"):  # refused before any rule: whatever the decision field says
        return _BY_KIND[kind]
    if isinstance(decision, str) and decision in _BY_DECISION:
        return _BY_DECISION[decision]
    return _BY_KIND.get(kind, "error")


def decision(call: Mapping[str, Any]) -> str:
    """The gate's decision as recorded, except ``invalid`` or ``not-found`` for a call refused before any rule
    (the record keeps its default, ``deny``); '?' when the record has none."""
    found = outcome(call)
    if found in ("invalid", "not-found"):
        return found
    recorded = call.get("decision")
    return recorded if isinstance(recorded, str) and recorded else "?"


def exception_name(call: Mapping[str, Any]) -> str | None:
    """The exception the program saw for a failed call (e.g. ``ToolDenied``); None for a call that returned."""
    if call.get("ok") is True or outcome(call) in ("running", "unknown"):
        return None
    return type(error_for(error_kind(call), "", "")).__name__


def error_message(call: Mapping[str, Any]) -> str:
    return text_of(as_dict(call.get("error")).get("message"))


def is_failure(found: Outcome) -> bool:
    return found in FAILURES


# ------------------------------------------------------------------ times

def parse_time(value: Any) -> datetime | None:
    """A recorded ISO 8601 timestamp as an aware UTC datetime, or None if it is not one."""
    if not isinstance(value, str) or not value or len(value) > MAX_TIME_TEXT:
        return None
    try:
        parsed = datetime.fromisoformat(value)  # Python 3.11 reads a trailing Z
    except ValueError:
        return None
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def format_time(moment: datetime | None, *, date: bool = True) -> str:
    """``2026-12-01 03:04:21.123 UTC`` (with ``date``) or ``03:04:21.123``; '?' for no time."""
    if moment is None:
        return "?"
    clock = moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
    return f"{moment:%Y-%m-%d} {clock} UTC" if date else clock


def format_duration(seconds: float | None) -> str:
    """A span a person reads at a glance: ``1.96 ms``, ``850 ms``, ``2.41 s``, ``3 min 12 s``, ``1 h 02 min``; '?' for none."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:.0f} ms" if ms >= 100 or ms == 0 else f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    hours, rest = divmod(round(seconds) // 60, 60)
    return f"{hours} h {rest:02d} min"


def span(start: Any, end: Any) -> float | None:
    """Seconds from one recorded timestamp to another; None unless both are times in order."""
    first, last = parse_time(start), parse_time(end)
    if first is None or last is None or last < first:
        return None
    return (last - first).total_seconds()


def call_started(call: Mapping[str, Any]) -> datetime | None:
    return parse_time(call.get("started"))


def call_finished(call: Mapping[str, Any]) -> datetime | None:
    """When a finished call's outcome was known: its start plus its duration (which includes any approval wait)."""
    started, took = call_started(call), number(call.get("duration_ms"))
    if started is None or took is None or outcome(call) == "running":
        return None
    try:
        return started + timedelta(milliseconds=took)
    except OverflowError:
        return None


def is_late(call: Mapping[str, Any], cell_ended: Any) -> bool:
    """Whether a call finished after its cell ended, or had not finished when the notebook was written."""
    if outcome(call) == "running":
        return True
    ended, finished = parse_time(cell_ended), call_finished(call)
    return ended is not None and finished is not None and finished > ended


# ------------------------------------------------------------------ approvals

@dataclass(frozen=True)
class Approval:
    """Who answered a call's approval request, and when (from the call's ``approval`` record)."""

    approver: str
    requested: datetime | None
    answered: datetime | None  # None: no answer came (timed out, withdrawn)
    reason: str = ""
    withdrawn: datetime | None = None

    @property
    def waited(self) -> float | None:
        """Seconds from the request to the answer (or to its withdrawal)."""
        end = self.answered or self.withdrawn
        if self.requested is None or end is None or end < self.requested:
            return None
        return (end - self.requested).total_seconds()


def approval(call: Mapping[str, Any]) -> Approval | None:
    """The approval of a call that asked for one; None for a call no rule sent to an approver."""
    record = call.get("approval")
    if not isinstance(record, dict):
        return None
    return Approval(approver=text_of(record.get("approver")) or "?", requested=parse_time(record.get("requested")),
                    answered=parse_time(record.get("answered")), reason=text_of(record.get("reason")),
                    withdrawn=parse_time(record.get("withdrawn")))


# ------------------------------------------------------------------ counts

@dataclass
class ToolSummary:
    """The calls of one tool: how many, their outcomes, and their time."""

    tool: str
    calls: int = 0
    outcomes: Counter[Outcome] = field(default_factory=Counter)
    total_ms: float = 0.0
    max_ms: float = 0.0

    @property
    def failed(self) -> int:
        return sum(n for found, n in self.outcomes.items() if is_failure(found))


def by_tool(calls: Iterable[Mapping[str, Any]]) -> list[ToolSummary]:
    """One summary per tool, the most called first (then by name)."""
    tools: dict[str, ToolSummary] = {}
    for call in calls:
        name = text_of(call.get("tool")) or "?"
        summary = tools.setdefault(name, ToolSummary(name))
        summary.calls += 1
        summary.outcomes[outcome(call)] += 1
        took = number(call.get("duration_ms")) or 0.0
        summary.total_ms += took
        summary.max_ms = max(summary.max_ms, took)
    return sorted(tools.values(), key=lambda s: (-s.calls, s.tool))


def by_outcome(calls: Iterable[Mapping[str, Any]]) -> dict[Outcome, int]:
    """How many calls had each outcome, in ``OUTCOMES`` order (outcomes no call had are left out)."""
    counts = Counter(outcome(call) for call in calls)
    return {found: counts[found] for found in OUTCOMES if counts[found]}


def by_decision(calls: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many calls had each decision (see ``decision``), most frequent first."""
    counts = Counter(decision(call) for call in calls)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def failures_first(calls: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The calls with failures first, each group in its recorded order."""
    listed = list(calls)
    return [c for c in listed if is_failure(outcome(c))] + [c for c in listed if not is_failure(outcome(c))]


__all__ = ["FAILURES", "LABELS", "OUTCOMES", "Approval", "Outcome", "ToolSummary", "approval",
           "as_dict", "as_list", "by_decision", "by_outcome", "by_tool", "call_finished", "call_started",
           "decision", "error_kind", "error_message", "exception_name", "failures_first", "format_duration",
           "count", "format_time", "is_failure", "is_late", "number", "outcome", "parse_time", "span", "text_of"]
