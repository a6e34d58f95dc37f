"""`cellgate run --scripted FILE` (issue 29, item 7): the documented offline way to try the agent loop, as the
README shows it on examples/northwind/scripted.toml. No API key and no network endpoint: the scripted model
is the tests' fake Messages API on loopback, and everything else (the SDK, gVisor, the gate, the record) is
real. The refusals before anything starts: tests/unit/test_run_offline.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import NORTHWIND, cellgate

pytestmark = pytest.mark.gvisor

TASK = "Follow up October's late NorthPost orders."


def test_the_northwind_script_runs_the_loop_offline_and_records_it(tmp_path: Path, runsc: object) -> None:
    work = tmp_path / "northwind"
    shutil.copytree(NORTHWIND, work, ignore=shutil.ignore_patterns("runs"))
    # No key, and an endpoint that answers nothing: the scripted run uses neither.
    done = cellgate("run", "--scripted", "scripted.toml", TASK, cwd=work, timeout=280,
                    env={"ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": "",
                         "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("Done: of 10,000 October orders, 312 went by NorthPost more than five days late; "
                           "each has a follow_up task.\n")
    assert "ended: end_turn after 3 turn(s)" in done.stderr, done.stderr
    (notebook,) = (work / "runs").glob("*.ipynb")
    nb = nbformat.read(notebook, as_version=4)
    assert (nb.metadata.cellgate.agent.model, nb.metadata.cellgate.agent.task) == ("scripted", TASK)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.outputs[0]["text"] for c in code] == ["10000 312\n", "[6, 7, 8, 9, 10, 11, 12, 13, 14]\n"]
    assert len(code[0].metadata.cellgate.calls) == 313  # every create_task went through the gate
    verified = cellgate("verify", str(notebook), cwd=work)
    assert verified.returncode == 0, verified.stdout + verified.stderr
