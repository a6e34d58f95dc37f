"""audit.call_summary: outcomes, counts and times of recorded calls, including records a person tampered with."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from cellgate.gate._terminal import head_and_tail, reveal, value_text
from cellgate.gate.audit import call_summary as cs

T0 = "2026-12-01T03:04:05.250Z"


def call(**fields: Any) -> dict[str, Any]:
    return {"seq": 1, "tool": "echo", "args": {}, "decision": "allow", "ok": True, "started": T0,
            "duration_ms": 12.5, **fields}


def failed(kind: str, decision: str = "deny", **fields: Any) -> dict[str, Any]:
    return call(ok=False, decision=decision, error={"kind": kind, "message": f"a {kind} call"}, **fields)


APPROVAL = {"approver": "queue:ada", "requested": T0, "answered": "2026-12-01T03:04:07.750Z", "reason": "fine"}


@pytest.mark.parametrize(("record", "expected", "decision", "exception"), [
    (call(), "allowed", "allow", None),
    (call(decision="approved", approval=APPROVAL), "approved", "approved", None),
    (call(decision="replayed"), "replayed", "replayed", None),
    (failed("denied", rule="tools.charge"), "denied-by-rule", "deny", "ToolDenied"),
    (failed("denied", "approval-denied", approval=APPROVAL), "denied-by-approver", "approval-denied", "ToolDenied"),
    (failed("denied", "approval-timeout"), "approval-timeout", "approval-timeout", "ToolDenied"),
    (failed("denied", "approval-withdrawn"), "approval-withdrawn", "approval-withdrawn", "ToolDenied"),
    (failed("invalid"), "invalid", "invalid", "ToolValidationError"),  # the record's decision says "deny"
    (failed("not_found"), "not-found", "not-found", "ToolNotFound"),
    (failed("budget"), "over-budget", "deny", "ToolBudgetExceeded"),
    (failed("rate_limited"), "rate-limited", "deny", "ToolRateLimited"),
    (failed("failed", "allow"), "error", "allow", "ToolError"),
    (failed("timeout", "allow"), "timeout", "allow", "ToolTimeout"),
    (failed("unavailable", "allow"), "unavailable", "allow", "ToolUnavailable"),
    (failed("unknown", "allow", outcome="needs-reconciliation"), "unknown", "allow", None),
    (call(ok=False, outcome="started"), "running", "allow", None),
    ({"ok": "yes", "decision": ["allow"], "error": "x"}, "error", "?", "ToolError"),  # tampered: never a crash
])
def test_every_recorded_call_has_one_outcome(record: dict[str, Any], expected: str, decision: str,
                                             exception: str | None) -> None:
    assert cs.outcome(record) == expected
    assert cs.decision(record) == decision
    assert cs.exception_name(record) == exception
    assert cs.is_failure(cs.outcome(record)) == (expected not in ("allowed", "approved", "replayed", "running"))


def test_counts_per_tool_outcome_and_decision() -> None:
    calls = [call(), call(duration_ms=30), call(tool="charge", decision="approved"), failed("invalid"),
             failed("denied", tool="charge"), failed("invalid", tool="charge")]
    assert cs.by_outcome(calls) == {"allowed": 2, "approved": 1, "denied-by-rule": 1, "invalid": 2}
    assert cs.by_decision(calls) == {"allow": 2, "invalid": 2, "approved": 1, "deny": 1}
    charge, echo = cs.by_tool(calls)
    assert (charge.tool, charge.calls, charge.failed, dict(charge.outcomes)) == (
        "charge", 3, 2, {"approved": 1, "denied-by-rule": 1, "invalid": 1})
    assert (echo.calls, echo.failed, echo.total_ms, echo.max_ms) == (3, 1, 55.0, 30)
    assert [cs.outcome(c) for c in cs.failures_first(calls)] == [
        "invalid", "denied-by-rule", "invalid", "allowed", "allowed", "approved"]


def test_times_read_and_read_out() -> None:
    moment = cs.parse_time(T0)
    assert moment == datetime(2026, 12, 1, 3, 4, 5, 250000, tzinfo=timezone.utc)
    assert cs.format_time(moment) == "2026-12-01 03:04:05.250 UTC"
    assert cs.format_time(moment, date=False) == "03:04:05.250"
    assert cs.parse_time("2026-12-01T04:04:05+01:00") == datetime(2026, 12, 1, 3, 4, 5, tzinfo=timezone.utc)
    for bad in (None, 17, "", "yesterday", "9" * 500, ["2026-12-01"]):
        assert cs.parse_time(bad) is None
    assert cs.format_time(None) == "?"
    assert [cs.format_duration(s) for s in (0, 0.0004, 0.00196, 0.0421, 0.85, 2.414, 192, 3725, None, -1,
                                            float("nan"))] == [
        "0 ms", "0.40 ms", "1.96 ms", "42.1 ms", "850 ms", "2.41 s", "3 min 12 s", "1 h 02 min", "?", "?", "?"]
    assert cs.span(T0, "2026-12-01T03:04:07.750Z") == 2.5
    assert cs.span("2026-12-01T03:04:07.750Z", T0) is None and cs.span(T0, "x") is None


def test_approvals_and_late_calls() -> None:
    asked = cs.approval(call(decision="approved", approval=APPROVAL))
    assert asked is not None and (asked.approver, asked.reason, asked.waited) == ("queue:ada", "fine", 2.5)
    assert cs.approval(call()) is None
    gone = cs.approval(failed("denied", "approval-withdrawn", approval={"approver": "queue", "answered": None,
                                                                          "requested": T0, "withdrawn": "nonsense"}))
    assert gone is not None and gone.answered is None and gone.waited is None
    assert cs.call_finished(call()) == datetime(2026, 12, 1, 3, 4, 5, 262500, tzinfo=timezone.utc)
    assert cs.is_late(call(), "2026-12-01T03:04:05.260Z")
    assert not cs.is_late(call(), "2026-12-01T03:04:05.263Z")
    assert cs.is_late(call(outcome="started", ok=False), "2026-12-01T03:04:09Z")
    assert not cs.is_late(call(duration_ms=float("inf")), "2026-12-01T03:04:05.260Z")
    assert not cs.is_late(call(duration_ms=1e300), "2026-12-01T03:04:05.260Z")  # overflows: unknown, not late


def test_values_are_shortened_head_and_tail_with_hidden_characters_escaped() -> None:
    # The views' one text-safety module: the elided count is of the shown text (the escape \u200b is 6 long)
    assert value_text({"b": 1, "a": "x\u202ey"}, 100) == '{"a": "x\\u202ey", "b": 1}'
    long = head_and_tail("a" * 1000 + "\u200b" + "z" * 1000, 90)
    assert long == "a" * 60 + " … ⟨1,916 characters elided⟩ … " + "z" * 30
    assert head_and_tail("\x1b[2J", 10) == "\\x1b[2J"


def test_plain_text_is_shown_as_it_is_and_a_long_run_of_blanks_still_by_its_count() -> None:
    # Printable ASCII takes a short way through the escaping (the views render thousands of fields): what it
    # shows must be what the full scan shows.
    assert reveal("title: Follow up on order 10248 (late)") == "title: Follow up on order 10248 (late)"
    assert reveal("a" + " " * 15 + "b") == "a" + " " * 15 + "b"
    assert reveal("a" + " " * 16 + "b") == "a ⟨16 blanks⟩ b"
    assert reveal("a" + " " * 16 + "b", compress=False) == "a" + " " * 16 + "b"
    assert reveal("tab\there") == "tab\\there" and reveal("") == ""
