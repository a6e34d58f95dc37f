"""The policy enforced on calls from the real sandbox: denials, approvals, budgets, parallel calls."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path

import nbformat
import pytest
from conftest import SAMPLE_TOOLS, cellgate

from cellgate.gate.audit.recorder import journal_path

POLICY = f'''
[tools]
modules = ["{SAMPLE_TOOLS}"]

[policy]
default = "deny"
approver = "queue"
approval_timeout = {{approval_timeout}}
max_calls_per_cell = 50

[policy.tools.echo]
decision = "allow"

[policy.tools.add]
decision = "approve"

[[policy.tools.add.rules]]
name = "small sums are routine"
when = {{{{ properties = {{{{ a = {{{{ maximum = 9 }}}} }}}} }}}}
decision = "allow"

[policy.tools.explode]
decision = "deny"
'''


def configured(session_factory, tmp_path_factory, approval_timeout: float = 60, **options):
    folder = tmp_path_factory.mktemp("policy")
    (folder / "cellgate.toml").write_text(POLICY.format(approval_timeout=approval_timeout))
    return session_factory(config=folder / "cellgate.toml", tools=[], **options)


@pytest.fixture(scope="module")
def governed(session_factory, tmp_path_factory, approvals):
    return configured(session_factory, tmp_path_factory, cell_timeout=2.0)


def wait_for_request(folder: Path, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while True:
        listed = cellgate("approvals", "list").stdout
        pending = sorted(folder.glob("*.request.json"))
        if pending:
            request_id = pending[0].name.removesuffix(".request.json")
            assert request_id in listed
            return request_id
        assert time.monotonic() < deadline, "no approval request appeared"
        time.sleep(0.05)  # polling the queue folder the gate writes to


def calls_of_last_cell(box) -> list[dict]:
    return nbformat.read(box.session.notebook_path, as_version=4).cells[-1].metadata.cellgate.calls


def test_denied_call_raises_tool_denied_naming_the_rule(governed) -> None:
    result = governed.execute(
        "try:\n    tools.explode('x')\nexcept PermissionError as e:\n    print(type(e).__name__, '|', e)")
    name, message = result.stdout.strip().split(" | ")
    assert name == "ToolDenied"
    assert message == ("tool 'explode' was denied by policy rule tools.explode.decision (decision: deny); "
                       "ask the operator to allow it")
    (call,) = calls_of_last_cell(governed)
    assert (call["decision"], call["rule"]) == ("deny", "tools.explode.decision")


def test_rule_allows_small_sums_without_asking(governed) -> None:
    result = governed.execute("print(tools.add(2, 3))")
    assert result.stdout == "5\n"
    (call,) = calls_of_last_cell(governed)
    assert call["rule"] == "tools.add.rules[0] (small sums are routine)" and call["decision"] == "allow"
    assert call["counters"]["cell"] == 1 and call["claimed"]["line"] == 1 and call["claimed"]["source_line"] == "print(tools.add(2, 3))"


def run_in_background(box, code: str) -> concurrent.futures.Future:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(box.execute, code)
    pool.shutdown(wait=False)
    return future


def test_queue_approval_denied_from_a_second_process(governed, approvals: Path) -> None:
    pending = run_in_background(governed, "try:\n    tools.add(50, 1)\nexcept tools.ToolDenied as e:\n    print(e)")
    request_id = wait_for_request(approvals)
    request = json.loads((approvals / f"{request_id}.request.json").read_text())
    assert request["tool"] == "add" and request["args"] == {"a": 50, "b": 1}
    done = cellgate("approvals", "deny", request_id, "--reason", "not today")
    assert done.returncode == 0 and f"denied {request_id}" in done.stdout
    result = pending.result(60)
    assert "was denied by approver queue:uid" in result.stdout and "not today" in result.stdout
    (call,) = calls_of_last_cell(governed)
    assert call["decision"] == "approval-denied" and call["approval"]["approver"].startswith("queue:")


def test_queue_approval_approved_runs_the_call_and_waiting_does_not_use_the_cell_clock(governed, approvals) -> None:
    started = time.monotonic()
    pending = run_in_background(governed, "print(tools.add(70, 2))")
    request_id = wait_for_request(approvals)
    # Let more wall-clock time pass than the cell's 2 s limit while the call waits for a person.
    time.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
    assert cellgate("approvals", "approve", request_id).returncode == 0
    result = pending.result(60)
    assert result.status == "ok" and result.stdout == "72\n"
    (call,) = calls_of_last_cell(governed)
    assert call["decision"] == "approved" and call["ok"] is True and call["approval"]["answered"]
    assert not list(approvals.glob("*.json"))  # single use: request and answer are gone


def test_approval_times_out(session_factory, tmp_path_factory, approvals) -> None:
    box = configured(session_factory, tmp_path_factory, approval_timeout=1)
    result = box.execute("try:\n    tools.add(99)\nexcept tools.ToolDenied as e:\n    print(e)")
    assert "no answer came within 1 s; it was not run" in result.stdout
    (call,) = calls_of_last_cell(box)
    assert call["decision"] == "approval-timeout" and call["ok"] is False


def test_budget_exceeded_mid_loop_keeps_the_earlier_calls(session_factory, tmp_path_factory) -> None:
    # A session of its own: the module's has a 2 s cell clock, and 50 gated calls on a busy machine can take longer.
    governed = configured(session_factory, tmp_path_factory)
    result = governed.execute("for i in range(80):\n    tools.echo(str(i))")
    assert result.status == "error" and result.error["ename"] == "ToolBudgetExceeded"
    assert "per-cell budget of 50 calls is used up (50 made)" in result.error["evalue"]
    calls = calls_of_last_cell(governed)
    assert [c["ok"] for c in calls] == [True] * 50 + [False]
    assert [c["args"]["text"] for c in calls[:50]] == [str(i) for i in range(50)]
    assert governed.execute("print(tools.echo('next cell, fresh budget'))").ok


def test_two_hundred_parallel_calls_complete_in_gate_order(session_factory) -> None:
    box = session_factory()
    result = box.execute(
        "import asyncio\n"
        "results = await asyncio.gather(*(tools.aio.echo(str(i)) for i in range(200)))\n"
        "print(results == [str(i) for i in range(200)])")
    assert result.stdout == "True\n"
    calls = calls_of_last_cell(box)
    assert len(calls) == 200 and all(c["ok"] for c in calls)
    # The order is the journal's, as the gate wrote it: the notebook's calls are sorted by seq when rendered.
    records = [json.loads(line) for line in journal_path(box.session.notebook_path).read_text().splitlines()]
    cell = [r["msg_id"] for r in records if r["event"] == "cell-started"][-1]
    started = [r["call"] for r in records if r["event"] == "call-started" and r["msg_id"] == cell]
    assert [c["seq"] for c in started] == sorted(c["seq"] for c in started)  # numbered as the gate took them
    assert [c["args"]["text"] for c in started] == [str(i) for i in range(200)]  # in the program's order
