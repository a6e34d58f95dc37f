"""`cellgate show` and `cellgate report` of a run recorded in gVisor: a call of each outcome, late output and a
kernel restart, read back as a reviewer reads them (the CLI in a subprocess). The golden and unit tests check the
same views exactly on a scripted run; this checks that a real recording has the shape they assume."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TOOLS, cellgate
from rich.console import Console

from cellgate.gate.review.show import show
from cellgate.gate.testing import ScriptedApprover

POLICY = """\
[policy]
default = "allow"

[policy.tools.fetch_invoice]
decision = "deny"

[policy.tools.issue_token]
decision = "approve"
"""
LATE = ("import threading\ngo = threading.Event()\n"
        "late = threading.Thread(target=lambda: (go.wait(), print('late', flush=True)))\nlate.start()")
CELLS = [
    "# the setup\nprint(tools.echo('hi'), tools.add(2))",  # allowed, allowed
    "tools.issue_token('ada')",  # approved
    "tools.issue_token('bob')",  # denied by the approver
    "tools.fetch_invoice('inv-1', api_key='k')",  # denied by rule
    "tools.add('two')",  # invalid arguments
    "tools.explode('the ledger is locked')",  # the tool failed
    "tools.slow(5)",  # timed out
    LATE,
    # The thread prints after cell 8 ended: its late output. Joined, its print is on IOPub before this cell's end.
    "go.set()\nlate.join(60)\nassert not late.is_alive()",
]


@pytest.fixture(scope="module")
def recorded(session_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("review")
    (folder / "cellgate.toml").write_text(POLICY)
    box = session_factory(config=folder / "cellgate.toml", tools=[SAMPLE_TOOLS], notebook=folder / "run.ipynb",
                          approver=ScriptedApprover(["allow", "deny"]), call_timeout=1.0)
    statuses = [box.execute(code).status for code in CELLS]
    assert statuses == ["ok", "ok", "error", "error", "error", "error", "error", "ok", "ok"]
    box.restart()
    assert box.execute("print('after')").ok
    return folder / "run.ipynb"


def test_show_json_of_a_recorded_run(recorded: Path) -> None:
    done = cellgate("show", str(recorded), "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    outcomes = [[c["outcome"] for c in cell["calls"]] for cell in data["cells"]]
    assert outcomes == [["allowed", "allowed"], ["approved"], ["denied-by-approver"], ["denied-by-rule"], ["invalid"],
                        ["error"], ["timeout"], [], [], []]
    assert data["totals"]["by_decision"] == {"allow": 4, "approval-denied": 1, "approved": 1, "deny": 1, "invalid": 1}
    cells = data["cells"]
    assert cells[0]["title"] == "print(tools.echo('hi'), tools.add(2))"  # the first line that is not a comment
    approved, refused = cells[1]["calls"][0], cells[2]["calls"][0]
    assert approved["approval"]["approver"] == refused["approval"]["approver"] == "scripted"
    assert approved["approval"]["answered"] >= approved["approval"]["requested"] >= approved["started"]
    assert refused["error"]["exception"] == "ToolDenied" and "denied by approver scripted" in refused["error"]["message"]
    assert cells[4]["calls"][0]["error"]["exception"] == "ToolValidationError"
    assert cells[6]["calls"][0]["error"] == {"exception": "ToolTimeout", "kind": "timeout",
                                             "message": "tool 'slow' did not finish within 1 s"}
    assert cells[7]["late_outputs"] == 1 and data["restarts"] == [
        {"after_cell": 9, "reason": "frontend", "variables_gone": None}]
    starts = [cell["started"] for cell in cells]
    assert starts == sorted(starts) and data["run"]["started"] == starts[0] and data["run"]["ended"] == cells[-1]["ended"]


def test_report_of_a_recorded_run(recorded: Path, tmp_path: Path) -> None:
    page = tmp_path / "run.html"
    done = cellgate("report", str(recorded), "-o", str(page), timeout=120)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "<h2>Approvals (2 asked)</h2>" in text and "scripted <small>answered 20" in text  # calls_view.approver_html
    assert "&#x21bb; kernel restarted (frontend)" in text and "&#x25c6; 1 late output" in text
    assert '<td class="fail">invalid arguments</td><td class="n">1</td>' in text
    terminal = io.StringIO()
    show(recorded, Console(file=terminal, width=200))
    assert "approver scripted approved it at " in terminal.getvalue()
    assert "kernel restarted (frontend)" in terminal.getvalue()
