"""A run with every kind of call and marker a reviewer meets, at known times, for `cellgate show` and `report`.

The notebook is made the way cellgate makes every audit notebook: journal records fed to the real
``Reducer`` and rendered by it; each call record is the real ``CallRecord.as_metadata``. Only the
times, ids and the sandbox are scripted, so the golden output of `show` is exact, times included. The
sandbox tier's ``test_review_views`` checks the same views on a run recorded in gVisor.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import nbformat

from cellgate.gate.audit.reducer import Reducer
from cellgate.gate.calls.record import CallRecord

START = datetime(2026, 12, 1, 9, 0, 0, tzinfo=timezone.utc)
# One call of each kind the gate records: (tool, args, decision, rule, error kind or None, approval).
ASKED_ADA = {"approver": "queue:ada", "requested": 2.0, "answered": 4.5, "reason": "checked the amount"}
ASKED_BOB = {"approver": "queue:bob", "requested": 6.0, "answered": 7.25, "reason": "not on a Friday"}


def iso(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Script:
    """Journal records at scripted times, applied to a real Reducer."""

    def __init__(self) -> None:
        self.reducer = Reducer()
        self.seq = 0
        self.calls = 0
        self.cells = 0

    def record(self, event: str, at: float, **data: Any) -> None:
        self.seq += 1
        self.reducer.apply({"seq": self.seq, "hash": f"{self.seq:064x}", "event": event, "time": iso(at), **data})

    def cell(self, source: str, at: float, took: float, calls: list[dict[str, Any]] = (), status: str = "ok",
             error: tuple[str, str] | None = None, output: str = "", limits: list[str] = (),
             late_calls: list[dict[str, Any]] = ()) -> str:
        self.cells += 1
        msg_id = f"cell-{self.cells}"
        self.record("cell-sent", at, msg_id=msg_id, source=source, silent=False)
        self.record("cell-started", at, msg_id=msg_id)
        self.record("execute-input", at, msg_id=msg_id, execution_count=self.cells)
        for call in [*calls, *late_calls]:
            self.record("call-started", at, msg_id=msg_id, call=call)
        for call in calls:
            self.record("call-finished", at, msg_id=msg_id, call=call)
        if output:
            self.record("output", at, msg_id=msg_id, output={"output_type": "stream", "name": "stdout",
                                                                "text": output})
        self.record("cell-ended", at + took, msg_id=msg_id, status=status, limits_hit=list(limits),
                    error={"ename": error[0], "evalue": error[1]} if error else None, execution_count=self.cells)
        for call in late_calls:  # recorded after its cell ended
            self.record("call-finished", at + took + 1, msg_id=msg_id, call=call)
        return msg_id

    def call(self, tool: str, args: dict[str, Any], at: float, took_ms: float, decision: str = "allow",
             rule: str | None = "tool default", error: str | None = None, message: str = "",
             result: Any = None, approval: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls += 1
        record = CallRecord(seq=self.calls, id=f"{self.calls:032x}", tool=tool, args=args, started=iso(at),
                            decision=decision, rule=rule, ok=error is None, duration_ms=took_ms,
                            args_sha256=f"{self.calls:064x}", cell_line=1, thread="MainThread")
        if error is None:
            record.result, record.result_bytes, record.result_sha256 = result, len(repr(result)), "ab" * 32
        else:
            record.error = {"kind": error, "message": message}
        if approval is not None:
            record.approval = {"approver": approval["approver"], "requested": iso(approval["requested"]),
                               "answered": iso(approval["answered"]) if approval.get("answered") else None,
                               "reason": approval.get("reason", "")}
        return record.as_metadata(inline_limit=4096)


def mixed_run(folder: Path) -> Path:
    """The run's notebook, ``folder/run.ipynb``: eleven cells, two kernel restarts (one after the memory limit),
    late output, a late call, and calls allowed, approved, denied by rule and by approver, invalid, failed and
    timed out; cell 10 makes 24 calls, two of them invalid."""
    s = Script()
    s.record("session-started", 0, metadata={
        "session_id": "5e55101d0123456789abcdef01234567",
        "sandbox": {"runtime": "gvisor", "runsc_version": "0.0~20240729.0", "platform": "systrap"},
        "versions": {"cellgate": "0.1.0"}, "journal": {"file": "run.journal.jsonl"}})
    s.cell("# Totals of the ledger\n\nrows = tools.ledger(3)\nprint(tools.echo('hi'))", 1.0, 0.5, [
        s.call("ledger", {"rows": 3}, 1.1, 12.5, result=[{"row": 0}, {"row": 1}, {"row": 2}]),
        s.call("echo", {"text": "hi"}, 1.2, 1.96, result="hi")], output="hi\n")
    s.cell("tools.issue_token('ada')", 2.0, 2.75, [
        s.call("issue_token", {"user": "ada"}, 2.0, 2510, "approved", "tools.issue_token.decision",
               result={"user": "ada"}, approval=ASKED_ADA)])
    denied = ("tool 'charge' was denied by approver queue:bob; the policy required approval "
              "(rule tools.charge.decision): not on a Friday")
    s.cell("tools.charge(7)", 6.0, 1.5, [
        s.call("charge", {"amount": 7}, 6.0, 1260, "approval-denied", "tools.charge.decision", "denied", denied,
               approval=ASKED_BOB)], "error", ("ToolDenied", denied))
    by_rule = ("tool 'fetch_invoice' was denied by policy rule tools.fetch_invoice.decision (decision: deny); "
               "ask the operator to allow it")
    s.cell("tools.fetch_invoice('inv-1', api_key='k')", 8.0, 0.05, [
        s.call("fetch_invoice", {"invoice_id": "inv-1", "api_key": "k"}, 8.01, 0.13, "deny",
               "tools.fetch_invoice.decision", "denied", by_rule)], "error", ("ToolDenied", by_rule))
    invalid = "tool 'add': argument a: 'two' is not of type 'integer'"
    s.cell("tools.add('two')", 8.5, 0.05, [
        s.call("add", {"a": "two", "b": 1}, 8.51, 0.14, "deny", None, "invalid", invalid)],
           "error", ("ToolValidationError", invalid))
    hostile = "x\u202eevil\x1b[2J" + "y" * 2000  # a bidi override, a screen clear, then a long tail
    s.cell("for job in jobs:\n    try:\n        job()\n    except tools.ToolError as e:\n        print(e)", 9.0, 1.25, [
        s.call("explode", {"reason": hostile}, 9.0, 2.17, error="failed",
               message="tool 'explode' failed: ValueError: the ledger is locked"),
        s.call("slow", {"seconds": 5}, 9.01, 1009.7, error="timeout", message="tool 'slow' did not finish within 1 s")])
    late = s.cell("threading.Thread(target=work).start()", 10.5, 0.04)
    s.record("late-output", 10.8, msg_id=late, output={"output_type": "stream", "name": "stdout", "text": "late\n"})
    s.cell("tools.slow(30)", 11.0, 3.0, [], "timeout", ("CellTimeout", "the cell ran for 3 s"), limits=["timeout"],
           late_calls=[s.call("slow", {"seconds": 30}, 11.2, 3800, error="timeout",
                              message="tool 'slow' did not finish within 3.8 s")])
    s.record("kernel-restarted", 16.0, reason="frontend", variables_gone=["rows", "jobs"])
    s.cell("big = bytearray(2 << 30)", 17.0, 2.0, [], "memory",
           ("SandboxMemoryLimit", "the sandbox reached its 1024 MB memory limit"), limits=["memory"])
    s.record("kernel-restarted", 19.5, reason="memory", variables_gone=[])
    s.cell("# many calls\nfor n in items:\n    try:\n        tools.echo(n)\n    except tools.ToolError:\n        pass", 20.0, 1.0, [
        s.call("echo", {"text": n if n in (4, 9) else str(n)}, 20.0 + n / 30, 1.5,
               **({"decision": "deny", "rule": None, "error": "invalid",
                   "message": f"tool 'echo': argument text: {n} is not of type 'string'"} if n in (4, 9) else
                  {"result": str(n)})) for n in range(24)])
    s.cell("print('done')", 21.5, 0.5, output="done\n")
    s.record("session-ended", 22.5)
    notebook = folder / "run.ipynb"
    nbformat.write(s.reducer.notebook("run.journal.jsonl"), notebook)
    return notebook
