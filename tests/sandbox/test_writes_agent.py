"""The model is told a failed cell's writes and retries it through execute_python's ``retry`` input.

The real agent loop (``AgentLoop``, the real ``anthropic`` SDK) against the local fake Messages API; the cells
run in the real gVisor sandbox, and the tools write to a file on the host (the world, as in test_writes_retry).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from agent_runs import result_text, results_of, run_agent
from test_writes_retry import LOOP, TOOLS, lines

from cellgate.extensions.anthropic.testing import reply, text, tool_use
from cellgate.gate.calls.writes import Writes

pytestmark = pytest.mark.gvisor

FAILING = "BROKEN = True\n" + LOOP
FIXED = "BROKEN = False\n" + LOOP


def test_the_model_is_told_the_committed_writes_and_its_retry_makes_only_the_missing_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> None:
    world = tmp_path / "world.jsonl"
    monkeypatch.setenv("CELLGATE_TEST_WORLD", str(world))
    (tmp_path / "tasks.py").write_text(TOOLS)
    seen: dict[str, int] = {}

    def after_the_failure(body: dict[str, Any]) -> dict[str, Any]:
        seen["lines after the failure"] = len(lines(world))
        return reply(text("7 are done; I retry the fixed loop."),
                     tool_use("execute_python", {"code": FIXED, "retry": True}))

    script = [
        reply(tool_use("execute_python", {"code": FAILING})),
        after_the_failure,
        # A retry after a cell that succeeded has nothing to retry: a tool error, and the loop goes on.
        reply(tool_use("execute_python", {"code": FIXED, "retry": True})),
        reply(tool_use("execute_python", {"code": "print(1)", "retry": "yes"})),
        reply(text("done")),
    ]
    run, requests, notebook = run_agent(tmp_path, script, config="[sandbox]\ncall_timeout = 2\n",
                                        tools=(tmp_path / "tasks.py",))
    assert run.ended == "end_turn" and run.final_text == "done"

    # The model is offered the input and told what it is for.
    [offered] = requests[0]["tools"]
    assert offered["input_schema"]["properties"]["retry"]["type"] == "boolean"
    assert offered["input_schema"]["required"] == ["code"]
    assert "retry: true" in requests[0]["system"]

    # Turn 1: the loop fails at the 8th write; the model is told the 7 made, with their arguments, and how to retry.
    assert seen["lines after the failure"] == 7
    [failed] = results_of(requests[1])
    told = result_text(failed)
    assert failed["is_error"] is True
    assert "RuntimeError: the 8th task's title could not be built" in told
    assert "Writes: 7 committed; 0 reads." in told
    made = re.findall(r'#\d+ create_task\(title="(task \d)"\) -> id (T-\d+)', told)
    assert made == [(f"task {i}", f"T-{i + 1}") for i in range(7)]
    assert "fix the code and call execute_python again with retry: true" in told
    assert told.index("RuntimeError") < told.index("Writes:")  # after the outputs

    # Turn 2: the fixed cell as a retry; the 7 are answered from the record, the 3 missing made: 10 on the host.
    [retried] = results_of(requests[2])
    told = result_text(retried)
    assert retried["is_error"] is False
    assert told.startswith("10 made; 10 exist\n")
    assert "Writes: 3 committed, 7 answered from the record; 1 read." in told
    assert told.count("(answered from the record of call #") == 7
    assert [t["title"] for t in lines(world)] == [f"task {i}" for i in range(10)]

    # Turn 3: nothing to retry; turn 4: a retry that is not a boolean. Neither ran anything.
    [refused] = results_of(requests[3])
    assert refused["is_error"] is True
    assert result_text(refused).startswith("execute_python with retry: true was refused, nothing ran: ")
    assert "nothing to retry; run the code without retry" in result_text(refused)
    [malformed] = results_of(requests[4])
    assert malformed["is_error"] is True and "retry is true or false, not \"yes\"" in result_text(malformed)
    assert len(lines(world)) == 10

    # The record says the same: the second cell is the retry, its calls answered from the first's.
    nb = nbformat.read(notebook, as_version=4)
    first, second = [c for c in nb.cells if c.cell_type == "code"]
    assert (first.metadata.cellgate.status, second.metadata.cellgate.status) == ("error", "ok")
    writes = Writes.of(second.metadata.cellgate.calls)
    assert [w.answered_from for w in writes.answered] == [c["seq"] for c in first.metadata.cellgate.calls]


def test_with_writes_plan_a_cell_s_writes_are_asked_once_as_a_plan_then_applied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> None:
    world = tmp_path / "world.jsonl"
    monkeypatch.setenv("CELLGATE_TEST_WORLD", str(world))
    (tmp_path / "tasks.py").write_text(TOOLS)
    script = [reply(tool_use("execute_python", {"code": FIXED})), reply(text("done"))]
    run, requests, notebook = run_agent(
        tmp_path, script, config='[policy]\napprover = "allow"\n\n[policy.tools.create_task]\ndecision = "approve"\n',
        tools=(tmp_path / "tasks.py",), writes="plan")
    assert run.ended == "end_turn"
    [done] = results_of(requests[1])
    assert done["is_error"] is False and result_text(done).startswith("10 made; 10 exist\n")
    assert len(lines(world)) == 10  # planned (none made), approved once, applied
    nb = nbformat.read(notebook, as_version=4)
    notes = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert sum(n.startswith("**A plan was made") for n in notes) == 1
    assert sum("was applied at" in n for n in notes) == 1
    [cell] = [c for c in nb.cells if c.cell_type == "code"]
    approvals = [c["approval"] for c in cell.metadata.cellgate.calls if c["tool"] == "create_task"]
    assert [a["planned_write"] for a in approvals] == list(range(1, 11))
    assert {a["approver"] for a in approvals} == {"allow"}
