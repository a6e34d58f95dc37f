"""The dispatcher's exact replies, records and journal order: each assertion kills mutants of calls/dispatch.py
that the end-to-end tests let through (scripts/mutation dispatch; CONTRIBUTING, "Mutation testing").

A real Dispatcher, real tools, the real policy, refusal ledger and lineage ledger; the journal is an in-memory
CallLog (the journal itself is tested in the audit tests), which keeps a copy of each record as it was when the
dispatcher handed it over."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from cellgate.gate._errors import SourceUnavailable
from cellgate.gate._json import canonical_json, json_bytes
from cellgate.gate.calls.approval import (
    AllowApprover,
    ApprovalAnswer,
    ApprovalRequest,
    Approver,
    CallbackApprover,
    args_digest,
)
from cellgate.gate.calls.asking import Waiting
from cellgate.gate.calls.dispatch import REFUSED_BEFORE_RULES, CallScope, Dispatcher, Outcome, Refused
from cellgate.gate.calls.observer import CallSpan
from cellgate.gate.calls.policy import CellCounts, Policy
from cellgate.gate.calls.protocol import CallReply, CallRequest, error_reply
from cellgate.gate.calls.record import CallRecord
from cellgate.gate.calls.registry import Tool, ToolRegistry
from cellgate.gate.calls.retry import CellWrites, idempotency_key
from cellgate.gate.calls.scrubber import SecretScrubber
from cellgate.gate.calls.tool_threads import Running
from cellgate.gate.session.cells.refusals import RefusalLedger

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


class Journal:
    """A CallLog in memory: the records as they were when started and when finished."""

    def __init__(self, broken: str | None = None, failing: bool = False) -> None:
        self.broken, self.failing = broken, failing
        self.started: list[tuple[Any, CallRecord]] = []
        self.finished: list[tuple[Any, CallRecord]] = []

    def unwritable(self) -> str | None:
        return self.broken

    async def call_started(self, cell: Any, record: CallRecord) -> None:
        if self.failing:
            raise OSError("disk full")
        self.started.append((cell, copy.deepcopy(record)))

    def call_finished(self, cell: Any, record: CallRecord) -> None:
        self.finished.append((cell, record))


def tool(name: str, function: Callable[..., Any], parameters: dict[str, Any] | None = None, **kw: Any) -> Tool:
    return Tool(name, "", parameters or OBJECT, function, **kw)


def gate(*tools: Tool, log: Journal | None = None, **policy: Any) -> Dispatcher:
    return Dispatcher(ToolRegistry(tools), log=log or Journal(), policy=Policy.model_validate({"default": "allow",
                                                                                              **policy}),
                      session_id="S")


def scope(source: str = "", **kw: Any) -> CallScope:
    return CallScope(cell="CELL", msg_id="m1", key="k1", source=source, **kw)


def serve(d: Dispatcher, name: str = "t", args: dict[str, Any] | None = None, call_id: str = "c1",
          where: CallScope | None = None, **request: Any) -> Outcome:
    return asyncio.run(d.serve(CallRequest(id=call_id, tool=name, args=args or {}, **request), where or scope()))


def error(outcome: Outcome) -> tuple[str, str]:
    assert outcome.reply.error is not None and outcome.reply.ok is False and outcome.reply.id == outcome.record.id
    assert outcome.reply.error == outcome.record.error and outcome.record.ok is False
    return outcome.reply.error["kind"], outcome.reply.error["message"]


# ---------------------------------------------------------------- admission

def test_admission_refuses_when_the_journal_cannot_be_written() -> None:
    d = gate(log=Journal(broken="disk gone"))
    assert d.admit(CallRequest(id="c", tool="t", args={}), scope()) == Refused(error_reply(
        "c", "unavailable", "the audit journal cannot be written (disk gone); the gate refuses calls until the "
        "operator fixes it"))


def test_admission_refuses_a_call_with_no_cell_running() -> None:
    assert gate().admit(CallRequest(id="c", tool="t", args={}), None) == Refused(
        error_reply("c", "no_cell", "tool 't' was called while no cell of this session is running; tools can only "
                    "be called from a running cell"),
        event={"reason": "no cell is running", "tool": "t", "id": "c"})


def test_admission_refuses_late_work_of_an_earlier_cell_and_admits_the_cell_itself() -> None:
    late = "x" * 200
    assert gate().admit(CallRequest(id="c", tool="t", args={}, cell=late), scope()) == Refused(
        error_reply("c", "no_cell", "tool 't' was called by work an earlier cell started (a thread that outlived its "
                    "cell); work that outlives its cell cannot act through the gate"),
        event={"reason": "late: from work an earlier cell started", "tool": "t", "id": "c", "cell": "x" * 128})
    assert gate().admit(CallRequest(id="c", tool="t", args={}, cell="m1"), scope()) is None
    assert gate().admit(CallRequest(id="c", tool="t", args={}), scope()) is None


def test_admission_refuses_once_the_cells_refusals_are_spent() -> None:
    ledger = RefusalLedger(budget=1)
    where = scope(refusals=ledger)
    assert gate().admit(CallRequest(id="c", tool="t", args={}), where) is None
    ledger.count = 1
    assert gate().admit(CallRequest(id="c", tool="t", args={}), where) == Refused(
        error_reply("c", "budget", "this cell's 1 refused calls ([sandbox] max_refusals_per_cell) are spent; the "
                    "cell is stopped"), refusal="dropped")
    assert ledger.count == 2 and (ledger.first_dropped, ledger.last_dropped) == ("t", "t")


# ---------------------------------------------------------------- a served call

def test_a_served_call_is_numbered_recorded_and_answered_before_its_record_is_finished() -> None:
    log = Journal()
    d = Dispatcher(ToolRegistry([tool("t", lambda a: {"got": a}, {"type": "object", "properties": {
        "a": {"type": "integer"}}})]), log=log, session_id="S", first_seq=7)
    answered: list[tuple[CallReply, int]] = []
    request = CallRequest(id="c1", tool="t", args={"a": 1})
    outcome = asyncio.run(d.serve(request, scope(), answer=lambda reply: answered.append((reply, len(log.finished)))))
    assert outcome.reply == CallReply(id="c1", ok=True, result={"got": 1}, encoded=b'{"got":1}')
    assert answered == [(outcome.reply, 0)] and outcome.refusal == "record"
    record = outcome.record
    assert log.started[0][0] == "CELL" and log.finished == [("CELL", record)]
    assert (record.seq, record.id, record.tool, record.args, record.decision, record.rule, record.ok) == (
        7, "c1", "t", {"a": 1}, "allow", "default", True)
    # The key: the lineage, the chain (the cell, m1), the tool, the arguments' digest and the occurrence.
    key = idempotency_key(d.lineage.id, "m1", "t", args_digest({"a": 1}), 0)
    assert record.args_sha256 == args_digest({"a": 1}) and record.idempotency_key == key
    assert log.started[0][1].idempotency_key == key and log.started[0][1].decision == "allow"
    assert record.result == {"got": 1} and record.result_text == '{"got":1}' and record.result_bytes == 9
    assert record.result_sha256 == hashlib.sha256(b'{"got":1}').hexdigest()
    assert record.counters == {"session": 1, "cell": 1, "tool_session": 1} and record.error is None
    assert record.duration_ms > 0 and record.started == log.started[0][1].started
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)", record.started)
    assert serve(d, "t", {"a": 2}, "c2").record.seq == 8


def test_the_counters_count_per_cell_and_a_cells_own_counts_are_recorded() -> None:
    d = gate(tool("t", lambda: 1))
    serve(d, call_id="a")
    d.new_cell()
    assert serve(d, call_id="b").record.counters == {"session": 2, "cell": 1, "tool_session": 2}
    counts = CellCounts(calls=4)
    assert serve(d, call_id="c", where=scope(counts=counts)).record.counters == {
        "session": 3, "cell": 5, "tool_session": 3}


def test_the_schema_defaults_are_what_the_tool_rules_and_record_see() -> None:
    seen: list[dict[str, Any]] = []
    schema = {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}

    def keep(**kw: Any) -> dict[str, Any]:
        seen.append(kw)
        return kw

    d = gate(tool("t", keep, schema), tools={"t": {"rules": [
        {"when": {"type": "object", "properties": {"n": {"const": 3}}, "required": ["n"]}, "decision": "deny",
         "name": "three"}]}})
    assert serve(d, args={"n": 4}, call_id="four").reply.result == {"n": 4} and seen == [{"n": 4}]
    seen.clear()
    outcome = serve(d)
    assert error(outcome) == ("denied", ("tool 't' was denied by policy rule tools.t.rules[0] (three) (decision: "
                                        "deny); ask the operator to allow it"))
    assert outcome.record.args == {"n": 3} and seen == []
    later = tool("u", keep, schema)
    d.tool_added(later)
    d.registry.add(later)
    assert serve(d, "u", call_id="c2").reply.result == {"n": 3} and seen == [{"n": 3}]
    assert error(serve(d, "u", {"n": "x"}, "c3")) == ("invalid", "tool 'u': argument n: 'x' is not of type 'integer'")


def test_a_tool_added_later_has_its_arguments_validated() -> None:
    d = gate()
    later = tool("u", lambda **kw: 1, {"type": "object", "properties": {}, "required": ["q"]})
    d.tool_added(later)
    d.registry.add(later)
    assert error(serve(d, "u")) == ("invalid", "tool 'u': argument (arguments): 'q' is a required property")


def test_the_record_keeps_the_line_the_kernel_names_when_the_source_has_it() -> None:
    d = gate(tool("t", lambda: 1))
    source = "a = 1\n" + "b" * 600 + "\nc"
    assert serve(d, call_id="1", where=scope(source), line=2).record.source_line == "b" * 500
    one = serve(d, call_id="2", where=scope(source), line=1).record
    assert (one.cell_line, one.source_line) == (1, "a = 1")
    assert serve(d, call_id="3", where=scope(source), line=3).record.source_line == "c"
    for n, line in enumerate((0, 4, -1)):
        record = serve(d, call_id=f"x{n}", where=scope(source), line=line).record
        assert (record.cell_line, record.source_line) == (line, None)
    none = serve(d, call_id="4", where=scope(source)).record
    assert (none.cell_line, none.source_line, none.thread) == (None, None, None)
    assert serve(d, call_id="5", thread="worker-1").record.thread == "worker-1"


def test_secret_arguments_are_digested_and_never_seen_again_in_the_record() -> None:
    def echo(token: str, note: str) -> dict[str, str]:
        return {"said": f"{note}", "token": token}

    schema = {"type": "object", "properties": {"token": {"type": "string"}, "note": {"type": "string"}}}
    d = gate(tool("t", echo, schema), tools={"t": {"secrets": ["token"]}})
    outcome = serve(d, args={"token": "hunter2-secret", "note": "n"}, thread="thread hunter2-secret")
    record = outcome.record
    assert record.args["note"] == "n" and "hunter2-secret" not in repr(record.args)
    assert record.args["token"] == SecretScrubber().digest("hunter2-secret", "t argument token")
    assert record.args_sha256 == args_digest(record.args)
    assert record.thread == "thread [redacted]"  # redacted as the call's own secret, before any marker
    assert outcome.reply.result == {"said": "n", "token": "hunter2-secret"}  # the cell gets what it sent
    assert "hunter2-secret" not in repr(record.result) and "hunter2-secret" not in (record.result_text or "")
    # a later call that passes the secret in another argument has it scrubbed too
    later = serve(d, args={"token": "other-secret", "note": "hunter2-secret"}, call_id="c2", where=scope(
        "hunter2-secret line"), line=1).record
    assert "hunter2-secret" not in repr(later.args) and later.source_line != "hunter2-secret line"
    assert "hunter2-secret" not in repr(later.result)


def test_a_secret_in_an_error_message_is_redacted() -> None:
    def fails(token: str) -> None:
        raise ValueError(f"bad token {token}")

    d = gate(tool("t", fails, {"type": "object", "properties": {"token": {"type": "string"}}}),
             tools={"t": {"secrets": ["token"]}})
    assert error(serve(d, args={"token": "s3cr3t-value"})) == ("failed", "tool 't' failed: ValueError: bad token "
                                                                        "[redacted]")


# ---------------------------------------------------------------- refusals before and by the policy

def test_an_unknown_tool_is_not_found_and_the_tools_are_named() -> None:
    outcome = serve(gate(tool("b", lambda: 1), tool("a", lambda: 1)), "zz")
    assert error(outcome) == ("not_found", "no tool named 'zz' in this session; the tools are: a, b")
    assert outcome.record.decision == "not-found" and outcome.record.rule is None
    assert error(serve(gate(), "zz"))[1] == "no tool named 'zz' in this session; the tools are: none"
    assert REFUSED_BEFORE_RULES == {"invalid": "invalid", "not_found": "not-found"}


def test_a_reused_call_id_is_invalid() -> None:
    d = gate(tool("t", lambda: 1))
    assert serve(d).reply.ok
    outcome = serve(d)
    assert error(outcome) == ("invalid", "call id c1 was already used in this session; each call needs a new id")
    assert outcome.record.decision == "invalid"
    assert serve(d, call_id="c2").reply.ok


def test_a_direct_only_tool_is_refused_to_code_and_served_to_the_model() -> None:
    d = gate(tool("t", lambda: 1), tools={"t": {"expose": "direct"}})
    outcome = serve(d)
    assert error(outcome) == ("denied", ("tool 't' may only be called by the model on its own turn ([policy.tools.t] "
                                        "expose = \"direct\"), not from code; call it as a tool, or ask the operator "
                                        "to expose it to code"))
    assert outcome.record.decision == "deny"
    assert serve(d, call_id="c2", where=scope(origin="direct")).reply.ok
    both = gate(tool("t", lambda: 1), tools={"t": {"expose": "both"}})
    assert serve(both).reply.ok


def test_invalid_arguments_name_where_and_keep_no_rule_decision() -> None:
    schema = {"type": "object", "properties": {"rows": {"type": "array", "items": {"type": "integer"}}}}
    outcome = serve(gate(tool("t", lambda rows: rows, schema)), args={"rows": [1, "x"]})
    assert error(outcome) == ("invalid", "tool 't': argument rows/1: 'x' is not of type 'integer'")
    assert outcome.record.decision == "invalid" and outcome.record.rule is None


def test_a_policy_refusal_says_its_reason_and_rule() -> None:
    d = gate(tool("t", lambda: 1), max_calls_per_cell=1)
    assert serve(d).reply.ok
    outcome = serve(d, call_id="c2")
    assert error(outcome) == ("budget", ("tool 't' refused: per-cell budget of 1 calls is used up (1 made) "
                                        "(rule max_calls_per_cell)"))
    assert (outcome.record.decision, outcome.record.rule) == ("deny", "max_calls_per_cell")
    denied = serve(gate(tool("t", lambda: 1), default="deny"))
    assert error(denied) == ("denied", ("tool 't' was denied by policy rule default (decision: deny); ask the "
                                       "operator to allow it"))
    assert denied.record.decision == "deny"


def test_the_lineage_ledger_refuses_what_a_fork_already_spent() -> None:
    parent = gate(tool("t", lambda: 1), max_calls_per_session=1)
    fork = gate(tool("t", lambda: 1), max_calls_per_session=1)
    fork.lineage = parent.lineage
    assert serve(parent).reply.ok and parent.counters.session == 1
    outcome = serve(fork)
    kind, message = error(outcome)
    assert kind == "budget" and message.startswith("tool 't' refused: ")
    assert (outcome.record.decision, outcome.record.rule) == ("deny", "max_calls_per_session")
    assert fork.counters.session == 0


def test_the_session_counters_follow_the_lineage_ledger() -> None:
    parent = gate(tool("t", lambda: 1))
    fork = gate(tool("t", lambda: 1))
    fork.lineage = parent.lineage
    serve(parent)
    serve(parent, call_id="c2")
    assert serve(fork).record.counters == {"session": 3, "cell": 1, "tool_session": 3}
    assert fork.counters.per_tool == {"t": 3}


def test_an_approved_call_runs_and_a_refused_approval_does_not() -> None:
    ran: list[int] = []
    registry = ToolRegistry([tool("t", lambda: ran.append(1))])
    approving = Dispatcher(registry, log=Journal(), policy=Policy.model_validate({"default": "approve"}),
                           approver=AllowApprover())
    outcome = serve(approving)
    assert outcome.reply.ok and outcome.record.decision == "approved" and ran == [1]
    log = Journal()
    refusing = Dispatcher(registry, log=log, policy=Policy.model_validate({"default": "approve"}))
    outcome = serve(refusing)
    assert not outcome.reply.ok and outcome.record.decision == "approval-denied" and ran == [1]
    assert log.started == [] and len(log.finished) == 1


# ---------------------------------------------------------------- running the tool

def test_no_tool_runs_when_its_intent_cannot_be_journalled() -> None:
    ran: list[int] = []
    outcome = serve(gate(tool("t", lambda: ran.append(1)), log=Journal(failing=True)))
    assert error(outcome) == ("unavailable", "tool 't' was not run: disk full") and ran == []


def test_the_idempotency_key_is_passed_only_to_a_tool_that_takes_one() -> None:
    keys: list[str] = []
    takes = tool("t", lambda idempotency_key: keys.append(idempotency_key), accepts_idempotency_key=True)
    d = gate(takes, tool("u", lambda **kw: kw))
    cell = scope(writes=CellWrites(chain="m1"))
    serve(d, call_id="a", where=cell)
    serve(d, call_id="a2", where=cell)  # the same call again in the cell: its second occurrence, another key
    assert keys == [idempotency_key(d.lineage.id, "m1", "t", args_digest({}), n) for n in (0, 1)]
    assert serve(d, "u", call_id="b").reply.result == {}


def test_failures_of_the_tool_are_typed() -> None:
    def raises() -> None:
        raise KeyError("k")

    def gone() -> None:
        raise SourceUnavailable("server down")

    d = gate(tool("t", raises), tool("u", gone))
    assert error(serve(d)) == ("failed", "tool 't' failed: KeyError: 'k'")
    assert error(serve(d, "u", call_id="c2")) == ("unavailable", "tool 'u' is unavailable: server down")


def test_async_tools_run_on_the_loop_and_fail_alike() -> None:
    async def add(a: int) -> int:
        return a + 1

    async def gone() -> None:
        raise SourceUnavailable("away")

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    d = gate(tool("t", add, schema), tool("u", gone))
    assert serve(d, args={"a": 1}).reply.result == 2
    assert error(serve(d, "u", call_id="c2")) == ("unavailable", "tool 'u' is unavailable: away")


def test_a_tool_past_its_deadline_times_out() -> None:
    async def slow() -> str:
        try:  # far past the deadline: a gate that set none gets "late", not the timeout
            await asyncio.wait_for(asyncio.Event().wait(), NET)
        except TimeoutError:
            return "late"
        raise AssertionError("never set")

    d = gate(tool("t", slow))
    d.call_timeout = 0.05
    assert error(serve(d)) == ("timeout", "tool 't' did not finish within 0.05 s")


def test_results_that_are_not_json_types_are_converted_and_said() -> None:
    d = gate(tool("t", lambda: {"s": {1}}), tool("u", lambda: float("nan")), tool("v", lambda: object()))
    outcome = serve(d)
    assert outcome.reply.result == {"s": [1]} and outcome.reply.encoded == b'{"s":[1]}'
    assert outcome.record.converted == ["result.s: set -> list"] and outcome.record.result == {"s": [1]}
    kind, message = error(serve(d, "u", call_id="c2"))
    assert kind == "failed" and message.startswith("tool 'u' returned a value that is not JSON: ")
    assert error(serve(d, "v", call_id="c3"))[0] == "failed"
    assert serve(gate(tool("t", lambda: [1]))).record.converted is None


def test_a_result_over_the_byte_limit_fails_and_one_at_it_passes() -> None:
    d = gate(tool("t", lambda: "x" * 8), max_result_bytes=10)  # '"xxxxxxxx"' is 10 bytes
    assert serve(d).reply.ok
    over = gate(tool("t", lambda: "x" * 9), max_result_bytes=10)
    assert error(serve(over)) == ("failed", ("tool 't' returned 11 bytes, over the 10 byte limit ([policy] "
                                            "max_result_bytes)"))


def test_a_refused_call_is_counted_and_a_repeat_is_folded_not_recorded() -> None:
    log = Journal()
    d = gate(log=log, default="deny")
    ledger = RefusalLedger(budget=5)
    where = scope(refusals=ledger)
    d.registry.add(tool("t", lambda: 1))
    d.tool_added(d.registry.get("t"))  # type: ignore[arg-type]
    first = asyncio.run(d.serve(CallRequest(id="a", tool="t", args={}), where))
    again = asyncio.run(d.serve(CallRequest(id="b", tool="t", args={}), where))
    assert (first.refusal, again.refusal) == ("record", "coalesced") and ledger.count == 2
    assert [r.id for _, r in log.finished] == ["a"]


def test_a_secret_result_is_recorded_as_its_digest() -> None:
    from cellgate.gate.calls.record import Secret

    d = gate(tool("t", lambda: {"key": Secret("tok-123456"), "n": 1}))
    outcome = serve(d)
    assert outcome.reply.result == {"key": "tok-123456", "n": 1}
    assert outcome.record.result["n"] == 1 and "tok-123456" not in repr(outcome.record.result)
    assert outcome.record.result_text == canonical_json(outcome.record.result)
    assert "tok-123456" not in (outcome.record.result_text or "")


def test_close_leaves_no_call_behind_when_none_runs() -> None:
    d = gate(tool("t", lambda: 1))
    serve(d)
    assert d.close() == [] and d.withdraw("k1", "ended") == []


def test_secret_arguments_noted_before_the_call_are_scrubbed_from_then_on() -> None:
    d = gate(tool("t", lambda: 1), tools={"t": {"secrets": ["token"]}})
    d.note_secret_args("t", {"token": "abc-secret-1", "other": "plain-value"})
    d.note_secret_args("u", {"token": "other-secret-2"})
    said = d.secrets.scrub_text("abc-secret-1 plain-value other-secret-2")
    assert said == "[secret: t argument token] plain-value other-secret-2"


# ---------------------------------------------------------------- approvals: what the desk is asked, and told

class Clock:
    """A cell clock that says when it was paused and resumed."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def pause(self) -> None:
        self.said.append("pause")

    def resume(self) -> None:
        self.said.append("resume")


class Notices:
    def __init__(self) -> None:
        self.shown: list[Waiting] = []

    def show(self, notice: Waiting) -> None:
        self.shown.append(notice)


class Observer:
    """The session's observer, as the telemetry is one: what the dispatcher tells it."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, int]] = []
        self.started: list[tuple[Any, str, str, str]] = []
        self.ended: list[CallRecord] = []
        observer = self

        class Span(CallSpan):
            def ids(self) -> dict[str, str] | None:
                return {"trace_id": "T", "span_id": "P"}

            def ended(self, record: CallRecord) -> None:
                observer.ended.append(record)

        self.span = Span()

    def call_started(self, cell: object, tool: str, call_id: str, origin: str) -> CallSpan:
        self.started.append((cell, tool, call_id, origin))
        return self.span

    def approvals_waiting(self, tool: str, change: int) -> None:
        self.waiting.append((tool, change))


def test_an_approval_is_asked_for_the_tool_rule_cell_clock_notices_and_principal() -> None:
    asked: list[ApprovalRequest] = []

    async def answer(request: ApprovalRequest) -> ApprovalAnswer:
        asked.append(request)
        return ApprovalAnswer("allow", "person", "fine", 1.0)

    d = Dispatcher(ToolRegistry([tool("t", lambda: 1)]), log=Journal(), session_id="S",
                   policy=Policy.model_validate({"default": "approve"}), approver=CallbackApprover(answer))
    d.principal = "alice"
    observer = Observer()
    d.telemetry = observer
    clock, notices = Clock(), Notices()
    outcome = serve(d, where=scope(clock=clock, notices=notices))
    assert outcome.reply.ok and outcome.record.decision == "approved"
    [request] = asked
    assert (request.id, request.tool, request.seq, request.principal) == ("S-1", "t", 1, "alice")
    assert clock.said == ["pause", "resume"]
    assert [(n.cell, n.tool, n.seq, n.outcome) for n in notices.shown] == [("k1", "t", 1, None),
                                                                             ("k1", "t", 1, "approved")]
    assert observer.waiting == [("t", 1), ("t", -1)]
    assert observer.started == [("CELL", "t", "c1", "code")] and observer.ended == [outcome.record]
    assert outcome.record.trace == {"trace_id": "T", "span_id": "P"}


def test_a_refused_approval_names_the_rule_that_asked_for_it() -> None:
    d = gate(tool("t", lambda: 1), tools={"t": {"rules": [{"when": {"required": ["n"]}, "decision": "approve",
                                                            "name": "one"}]}})
    observer = Observer()
    d.telemetry = observer
    outcome = serve(d, args={"n": 1})
    assert error(outcome) == ("denied", "tool 't' was denied by approver deny; the policy required approval (rule "
                                        "tools.t.rules[0] (one)): no approver is configured ([policy] approver = "
                                        "'deny')")
    assert (outcome.record.decision, outcome.record.rule) == ("approval-denied", "tools.t.rules[0] (one)")
    assert observer.waiting == [("t", 1), ("t", -1)]  # told it ended, though refused


def test_a_call_of_a_cell_already_withdrawn_is_not_asked_and_says_why() -> None:
    asked: list[ApprovalRequest] = []

    def yes(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    d = Dispatcher(ToolRegistry([tool("t", lambda: 1)]), log=Journal(), session_id="S",
                   policy=Policy.model_validate({"default": "approve"}), approver=CallbackApprover(yes))
    assert d.withdraw("k1", "interrupted") == []
    outcome = serve(d)
    assert error(outcome) == ("denied", "tool 't' was waiting for approval (policy rule default) when its cell ended "
                                        "(interrupted); the request was withdrawn and the tool was not run")
    assert outcome.record.decision == "approval-withdrawn" and asked == []
    other = serve(d, call_id="c2", where=CallScope(cell="CELL", msg_id="m2", key="k2", source=""))
    assert other.reply.ok and len(asked) == 1  # another cell's call is asked for
    assert asked[0].principal is None  # the session acts for nobody named


def test_withdraw_hands_back_the_requests_the_ended_cell_waits_for() -> None:
    waiting = asyncio.Event()
    d = Dispatcher(ToolRegistry([tool("t", lambda: 1)]), log=Journal(), session_id="S",
                   policy=Policy.model_validate({"default": "approve"}))

    class Holding(Approver):
        name = "holding"
        withdrawn: list[tuple[str, str]] = []

        async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
            waiting.set()
            with contextlib.suppress(TimeoutError):  # withdrawn at once; a gate that never withdraws it gets "allow"
                await asyncio.wait_for(asyncio.Event().wait(), NET)
            return ApprovalAnswer("allow", self.name, "not withdrawn", 1.0)

        def withdraw(self, request: ApprovalRequest, reason: str) -> None:
            self.withdrawn.append((request.id, reason))

    d.approvals.approver = Holding()

    async def run() -> tuple[Outcome, list[ApprovalRequest], list[ApprovalRequest]]:
        call = asyncio.ensure_future(d.serve(CallRequest(id="c1", tool="t", args={}), scope()))
        await asyncio.wait_for(waiting.wait(), NET)
        other = d.withdraw("k2", "ended")
        gone = d.withdraw("k1", "ended")
        return await call, other, gone

    outcome, other, gone = asyncio.run(run())
    assert other == [] and [r.id for r in gone] == ["S-1"] and Holding.withdrawn == [("S-1", "ended")]
    assert error(outcome)[1].endswith("when its cell ended (ended); the request was withdrawn and the tool was not run")


# ---------------------------------------------------------------- the lineage ledger, the policy's clock and counts

def test_a_lineage_ledger_that_cannot_be_used_makes_the_call_unavailable() -> None:
    ran: list[int] = []
    d = gate(tool("t", lambda: ran.append(1)))
    d.lineage.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.lineage.path.mkdir()  # a folder where the ledger's file belongs
    try:
        outcome = serve(d)
    finally:
        d.lineage.path.rmdir()
    assert error(outcome) == ("unavailable", "tool 't' was not run: the lineage's budget ledger cannot be used "
                                             "(<host path> is not a regular file of this user; the lineage ledger "
                                             "is not used)")  # the path redacted
    assert ran == [] and d.counters.session == 0


def test_a_rate_limit_is_decided_and_counted_on_the_gates_clock() -> None:
    d = gate(tool("t", lambda: 1), tools={"t": {"rate": "1/hour"}})
    assert serve(d).reply.ok
    assert error(serve(d, call_id="c2")) == ("rate_limited", "tool 't' refused: rate limit 1/hour reached for 't' "
                                                             "(rule tools.t.rate)")


def test_the_cells_own_counts_are_what_its_budget_is_decided_and_counted_on() -> None:
    d = gate(tool("t", lambda: 1), max_calls_per_cell=2)
    counts = CellCounts()
    assert serve(d, where=scope(counts=counts)).reply.ok
    assert (counts.calls, counts.per_tool, d.counters.cell) == (1, {"t": 1}, 0)
    assert error(serve(d, call_id="c2", where=scope(counts=CellCounts(calls=2)))) == (
        "budget", "tool 't' refused: per-cell budget of 2 calls is used up (2 made) (rule max_calls_per_cell)")
    assert serve(d, call_id="c3").reply.ok and d.counters.cell == 1  # the dispatcher's own cell still has room


# ---------------------------------------------------------------- slots and deadlines

# How long a test waits for what a broken gate never does (a bound against hanging, never a synchronization): the
# calls it waits for are started at once by a working gate.
NET = 3.0


class Holders:
    """An async tool whose calls hold their slot until released; ``holding`` is set once ``count`` calls hold."""

    def __init__(self, count: int) -> None:
        self.count, self.started = count, 0
        self.holding, self.release = asyncio.Event(), asyncio.Event()

    async def hold(self) -> str:
        self.started += 1
        if self.started >= self.count:
            self.holding.set()
        await self.release.wait()
        return "held"


async def crowd(d: Dispatcher, holders: Holders) -> tuple[list[Outcome], Outcome]:
    """``holders.count`` calls that hold their slots, and one more call while they do (released after it ends, or
    after NET when the gate lets it wait on)."""
    held = [asyncio.ensure_future(d.serve(CallRequest(id=f"h{n}", tool="t", args={}), scope()))
            for n in range(holders.count)]
    await asyncio.wait_for(holders.holding.wait(), NET)
    extra = asyncio.ensure_future(d.serve(CallRequest(id="extra", tool="t", args={}), scope()))
    await asyncio.wait({extra}, timeout=NET)
    holders.release.set()
    return list(await asyncio.gather(*held)), await extra


def test_a_call_waits_for_a_slot_only_up_to_the_queue_bound() -> None:
    holders = Holders(1)
    d = gate(tool("t", holders.hold), max_queue_wait=0.05, tools={"t": {"max_concurrency": 1, "max_queue_wait": 0.01}})
    held, extra = asyncio.run(crowd(d, holders))
    assert [o.reply.result for o in held] == ["held"] and holders.started == 1
    assert error(extra) == ("busy", ("tool 't' was not run: all 1 of its slots ([policy.tools.t] max_concurrency) "
                                     "stayed taken for 0.01 s ([policy] max_queue_wait); the gate is busy, try "
                                     "again later"))


def test_a_tool_without_a_policy_entry_has_eight_slots_and_the_policys_queue_bound() -> None:
    holders = Holders(8)
    d = gate(tool("t", holders.hold), max_queue_wait=0.01)
    held, extra = asyncio.run(crowd(d, holders))
    assert [o.reply.result for o in held] == ["held"] * 8 and holders.started == 8
    assert error(extra) == ("busy", "tool 't' was not run: all 8 of its slots ([policy.tools.t] max_concurrency) "
                                    "stayed taken for 0.01 s ([policy] max_queue_wait); the gate is busy, try again "
                                    "later")


def test_a_tool_entry_without_its_own_queue_bound_takes_the_policys() -> None:
    holders = Holders(2)
    d = gate(tool("t", holders.hold), max_queue_wait=0.02, tools={"t": {"max_concurrency": 2}})
    held, extra = asyncio.run(crowd(d, holders))
    assert [o.reply.result for o in held] == ["held"] * 2 and holders.started == 2
    assert error(extra) == ("busy", "tool 't' was not run: all 2 of its slots ([policy.tools.t] max_concurrency) "
                                    "stayed taken for 0.02 s ([policy] max_queue_wait); the gate is busy, try again "
                                    "later")


def test_a_blocking_tool_waits_for_the_sessions_threads_up_to_the_bound() -> None:
    running, release = threading.Event(), threading.Event()

    def hold() -> int:
        running.set()
        release.wait(NET)  # the test sets it at once; the bound only keeps a broken gate from hanging the run
        return 1

    d = Dispatcher(ToolRegistry([tool("t", hold)]), log=Journal(), session_id="S", max_workers=1,
                   policy=Policy.model_validate({"default": "allow", "max_queue_wait": 0.01}))

    async def run() -> tuple[Outcome, Outcome]:
        first = asyncio.ensure_future(d.serve(CallRequest(id="a", tool="t", args={}), scope()))
        assert await asyncio.to_thread(running.wait, NET)
        second = asyncio.ensure_future(d.serve(CallRequest(id="b", tool="t", args={}), scope()))
        await asyncio.wait({second}, timeout=NET)
        release.set()
        return await first, await second

    first, second = asyncio.run(run())
    assert first.reply.ok
    assert error(second) == ("busy", "tool 't' was not run: the session's tool threads stayed taken for 0.01 s "
                                     "([policy] max_queue_wait); the gate is busy, try again later")


def test_a_blocking_tool_past_its_deadline_times_out_and_is_left_behind_at_close() -> None:
    release = threading.Event()
    d = gate(tool("t", lambda: release.wait(NET)))  # released below; the bound keeps a broken gate from hanging
    d.call_timeout = 0.05
    try:
        outcome = serve(d)
        assert error(outcome) == ("timeout", "tool 't' did not finish within 0.05 s")
        assert d.close() == [Running(1, "c1", "t", outcome.record.started)]
    finally:
        release.set()


# ---------------------------------------------------------------- the record: observer, decision inputs, digests

def test_a_cancelled_call_still_ends_its_span_with_its_record() -> None:
    running = asyncio.Event()

    async def hold() -> str:
        running.set()
        await asyncio.wait_for(asyncio.Event().wait(), NET)
        return "not cancelled"

    d = gate(tool("t", hold))
    observer = Observer()
    d.telemetry = observer

    async def run() -> BaseException | Outcome:
        call = asyncio.ensure_future(d.serve(CallRequest(id="c1", tool="t", args={}), scope()))
        await asyncio.wait_for(running.wait(), NET)
        call.cancel()
        try:
            return await call
        except asyncio.CancelledError as exc:
            return exc

    assert isinstance(asyncio.run(run()), asyncio.CancelledError)
    assert [(r.seq, r.id, r.tool) for r in observer.ended] == [(1, "c1", "t")]


def test_the_tools_own_default_decision_and_the_sessions_principal_reach_the_policy() -> None:
    d = gate(Tool("t", "", OBJECT, lambda: 1, decision="deny"))
    assert error(serve(d)) == ("denied", "tool 't' was denied by policy rule tool default for t (decision: deny); "
                                         "ask the operator to allow it")
    only = gate(tool("t", lambda: 1), tools={"t": {"rules": [{"principals": ["alice"], "when": {},
                                                                "decision": "deny", "name": "not alice"}]}})
    assert serve(only).reply.ok
    only.principal = "alice"
    assert error(serve(only, call_id="c2"))[1].startswith("tool 't' was denied by policy rule tools.t.rules[0] (not "
                                                          "alice)")


def test_the_recorded_text_of_a_result_json_spells_its_own_way_is_the_canonical_json() -> None:
    value = {"big": 1.5e300, "small": 0.00001, "tiny": 1e-7}  # no null: the reply is then orjson's own bytes
    outcome = serve(gate(tool("t", lambda: value)))
    text = canonical_json(value)  # 1e-07, where the reply's one encode spells it 1e-7
    assert outcome.reply.encoded == json_bytes(value) != text.encode() and outcome.record.converted is None
    assert outcome.record.result_text == text and outcome.record.result == value
    assert (outcome.record.result_bytes, outcome.record.result_sha256) == (
        len(text.encode()), hashlib.sha256(text.encode()).hexdigest())


def test_the_duration_is_the_calls_own_in_milliseconds() -> None:
    inner: list[float] = []

    def work() -> int:
        began = time.perf_counter()
        total = sum(range(20000))
        inner.append(time.perf_counter() - began)
        return total

    d = gate(tool("t", work))
    began = time.perf_counter()
    outcome = serve(d)
    outside = time.perf_counter() - began
    assert inner[0] * 1000 <= outcome.record.duration_ms <= outside * 1000


def test_a_secret_result_is_recorded_as_its_keyed_digest_and_converted_alike() -> None:
    from cellgate.gate.calls.record import Secret

    d = gate(tool("t", lambda: {"key": Secret("tok-123456"), "s": {1}}))
    outcome = serve(d)
    digest = SecretScrubber().digest("tok-123456", "t result")
    assert outcome.reply.result == {"key": "tok-123456", "s": [1]}
    assert outcome.record.result == {"key": digest, "s": [1]}
    text = canonical_json({"key": digest, "s": [1]})
    assert (outcome.record.result_text, outcome.record.result_bytes, outcome.record.result_sha256) == (
        text, len(text.encode()), hashlib.sha256(text.encode()).hexdigest())


def test_each_tool_has_slots_of_its_own() -> None:
    holders = Holders(1)
    d = gate(tool("t", holders.hold), tool("u", lambda: "u ran"), max_queue_wait=0.01,
             tools={"t": {"max_concurrency": 1}, "u": {"max_concurrency": 1}})

    async def run() -> tuple[Outcome, Outcome]:
        held = asyncio.ensure_future(d.serve(CallRequest(id="h", tool="t", args={}), scope()))
        await asyncio.wait_for(holders.holding.wait(), NET)
        other = await d.serve(CallRequest(id="u1", tool="u", args={}), scope())
        holders.release.set()
        return await held, other

    held, other = asyncio.run(run())
    assert (held.reply.result, other.reply.result) == ("held", "u ran")


def test_a_gate_made_with_its_defaults_keys_calls_by_its_own_lineage_and_has_a_30_s_deadline() -> None:
    d = Dispatcher(ToolRegistry([tool("t", lambda: 1)]), log=Journal())
    assert serve(d).record.idempotency_key == idempotency_key(d.lineage.id, "m1", "t", args_digest({}), 0)
    assert d.call_timeout == 30.0  # the documented default of [sandbox] call_timeout


def test_an_approval_waits_only_up_to_the_policys_approval_timeout() -> None:
    class Slow(Approver):
        name = "slow"

        async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
            with contextlib.suppress(TimeoutError):  # past the timeout: a gate that set none gets "allow"
                await asyncio.wait_for(asyncio.Event().wait(), NET)
            return ApprovalAnswer("allow", self.name, "late", 1.0)

    d = Dispatcher(ToolRegistry([tool("t", lambda: 1)]), log=Journal(), session_id="S", approver=Slow(),
                   policy=Policy.model_validate({"default": "approve", "approval_timeout": 0.01}))
    outcome = serve(d)
    assert error(outcome) == ("denied", "tool 't' needed approval (policy rule default) and no answer came within "
                                        "0.01 s; it was not run")
    assert outcome.record.decision == "approval-timeout"
