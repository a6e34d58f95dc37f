"""The agent loop's code mode end to end in the real gVisor sandbox, its notebook against the reviewed golden one
in snapshots/ (``CELLGATE_UPDATE_SNAPSHOTS=1`` writes it and fails; review the diff and rerun)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from agent_runs import echo_last_result, result_text, results_of, run_agent
from conftest import COUNTED_TOOLS as COUNTED
from conftest import SNAPSHOTS, cellgate

from cellgate.extensions.anthropic.testing import APIFailure, estimate_tokens, reply, text, tool_use
from cellgate.gate.ext import untrusted_markdown
from cellgate.gate.testing import normalize_notebook

GOLDEN = SNAPSHOTS / "agent_code_mode.json"


def test_code_mode_runs_each_program_as_a_cell_and_records_the_turns(tmp_path: Path, runsc: object,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    count = tmp_path / "count"
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(count))
    program = "rows = tools.ledger(50)\nprint(sum(r['amount'] for r in rows), tools.charge(7))"
    script = [
        APIFailure(529),  # overloaded once: the SDK's own retry handles it
        reply(text("I will total the ledger."), tool_use("execute_python", {"code": program})),
        echo_last_result("The total and receipt:"),
    ]
    run, requests, notebook = run_agent(tmp_path, script, tools=(COUNTED,))
    assert (run.ended, run.turns, run.requests) == ("end_turn", 2, 2)
    assert len(requests) == 3  # the failed attempt, then two turns
    assert [t["name"] for t in requests[1]["tools"]] == ["execute_python"]
    assert "- tools.charge(amount: int): Charge an amount" in requests[1]["system"]
    [result] = results_of(requests[2])
    assert result["is_error"] is False and result_text(result) == "3675 charged 7\n"
    assert run.final_text == "The total and receipt: 3675 charged 7"

    nb = nbformat.read(notebook, as_version=4)
    assert [(c.cell_type, c.metadata.cellgate.get("kind")) for c in nb.cells] == [
        ("markdown", "task"), ("markdown", "model"), ("code", None), ("markdown", "model")]
    assert nb.cells[1].source == untrusted_markdown("I will total the ledger.")[0]  # the model's text, sanitized
    assert nb.cells[2].source == program
    assert [c["tool"] for c in nb.cells[2].metadata.cellgate.calls] == ["ledger", "charge"]
    agent = nb.metadata.cellgate.agent
    assert (agent["model"], agent["mode"], agent["ended"]["reason"]) == ("claude-test", "code", "end_turn")
    # Per-turn usage is what the API reported (the fake's estimate of each request), summed.
    reported = [estimate_tokens(body) for body in requests[1:]]
    assert [t["usage"]["input_tokens"] for t in agent["turns"]] == reported
    assert agent["usage"]["input_tokens"] == sum(reported) == run.usage["input_tokens"]
    assert nb.cells[1].metadata.cellgate["usage"]["input_tokens"] == reported[0]
    # The whole notebook, run-specific values normalized, against the golden one (regenerate with
    # CELLGATE_UPDATE_SNAPSHOTS=1 and review the diff).
    normalized = json.dumps(normalize_notebook(nb), indent=1, sort_keys=True) + "\n"
    if os.environ.get("CELLGATE_UPDATE_SNAPSHOTS") == "1":
        GOLDEN.write_text(normalized)
        pytest.fail(f"wrote {GOLDEN.name}; review `git diff tests/golden/snapshots`, then rerun without "
                    "CELLGATE_UPDATE_SNAPSHOTS (a run that writes the golden notebook never passes)")
    assert normalized == GOLDEN.read_text()

    assert cellgate("verify", str(notebook)).returncode == 0
    shown = cellgate("show", str(notebook), env={"COLUMNS": "200"})
    assert f"2 turns, ended end_turn; tokens in {sum(reported):,}" in shown.stdout
    count.write_text("")
    replayed = cellgate("replay", str(notebook))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.splitlines()[0] == "cell 1: recorded ok, replayed ok"
    assert "live calls: 0" in replayed.stdout and count.read_text() == ""
