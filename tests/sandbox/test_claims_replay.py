"""README claims about replay with no test before (issue 21): `--live` tools go to the real gate, so the
operator's policy applies to them; with `--interactive`, the cells run in the kernel left after the replay are
gated and recorded too, in the replay's own notebook."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import CELLGATE, interactive_replay
from conftest import cellgate as run_cellgate

pytestmark = pytest.mark.gvisor

COUNTED = Path(__file__).resolve().parent.parent / "tools" / "counted.py"
CELLS = ["rows = tools.ledger(300)", "receipt = tools.charge(len(rows))", "print(rows[0]['customer'])"]
POLICY = f"""
[tools]
modules = [{json.dumps(str(COUNTED))}]
[policy]
default = "deny"
[policy.tools.ledger]
decision = "allow"
[policy.tools.charge]
decision = "allow"
[[policy.tools.charge.rules]]
name = "big charges are refused"
when = {{ properties = {{ amount = {{ minimum = 1000 }} }}, required = ["amount"] }}
decision = "deny"
"""



def cellgate(*args: str, count: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_cellgate(*args, timeout=300, env={"CELLGATE_TEST_COUNT_FILE": str(count)}, **kwargs)


def charges(count: Path) -> list[str]:
    return count.read_text().splitlines() if count.exists() else []


@pytest.fixture()
def recorded(tmp_path: Path, runsc: object) -> tuple[Path, Path, Path]:
    """A recorded run whose third cell fails (charging 300 on the way), and an operator's config in another folder
    (a cellgate.toml beside the recording would be ignored)."""
    count = tmp_path / "count"
    run = tmp_path / "recorded"
    run.mkdir()
    programs = []
    for index, source in enumerate(CELLS):
        programs.append(run / f"c{index}.py")
        programs[-1].write_text(source)
    notebook = run / "run.ipynb"
    done = cellgate("exec", *map(str, programs), "--tools", str(COUNTED), "--notebook", str(notebook), count=count)
    assert done.returncode == 1 and "KeyError: 'customer'" in done.stderr, done.stderr
    assert charges(count) == ["ledger", "300"]
    count.write_text("")
    operator = tmp_path / "operator"
    operator.mkdir()
    return notebook, count, operator


def calls_of(notebook: Path) -> list[list[tuple[str, Any, str]]]:
    nb = nbformat.read(notebook, as_version=4)
    return [[(c["tool"], c["args"], c["decision"]) for c in cell.metadata.cellgate.calls]
            for cell in nb.cells if cell.cell_type == "code"]


def test_live_tools_in_a_replay_are_decided_by_the_operator_s_policy(recorded: tuple[Path, Path, Path]) -> None:
    notebook, count, operator = recorded
    config = operator / "cellgate.toml"
    config.write_text(POLICY.replace('[policy.tools.charge]\ndecision = "allow"',
                                     '[policy.tools.charge]\ndecision = "deny"'))
    output = operator / "denied.ipynb"
    done = cellgate("replay", str(notebook), "--live", "charge", "--config", str(config), "--notebook", str(output),
                    count=count, cwd=operator)
    lines = done.stdout.splitlines()
    assert "cell 2: recorded ok, replayed error" in lines, done.stdout + done.stderr
    assert charges(count) == []  # the live charge the recording made was refused, not run
    replayed = calls_of(output)
    assert replayed[1] == [("charge", {"amount": 300}, "deny")], replayed
    nb = nbformat.read(output, as_version=4)
    *printed, calls = nb.cells[1].outputs  # the last output is the host's table of the cell's calls
    assert printed[-1]["ename"] == "ToolDenied" and calls["metadata"]["cellgate"] == {"authored_by": "host"}
    # The same replay under a policy that allows it: the live call runs (the policy, not replay, refused above).
    config.write_text(POLICY)
    done = cellgate("replay", str(notebook), "--live", "charge", "--config", str(config), "--notebook",
                    str(operator / "allowed.ipynb"), count=count, cwd=operator)
    assert "cell 2: recorded ok, replayed ok" in done.stdout.splitlines(), done.stdout + done.stderr
    assert charges(count) == ["300"]


def test_cells_run_in_an_interactive_replay_are_gated_and_recorded(recorded: tuple[Path, Path, Path]) -> None:
    notebook, count, operator = recorded
    config = operator / "cellgate.toml"
    config.write_text(POLICY)
    output = operator / "interactive.ipynb"
    with subprocess.Popen([*CELLGATE, "replay", str(notebook), "--interactive", "--live", "charge", "--config",
                           str(config), "--notebook", str(output)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=operator,
                          env={**os.environ, "CELLGATE_TEST_COUNT_FILE": str(count)}) as replay:
        with interactive_replay(replay) as run:
            allowed, out = run("print(tools.charge(7))")
            assert allowed["status"] == "ok" and out == "charged 7\n", (allowed, out)
            refused, _ = run("tools.charge(5000)")
            assert refused["status"] == "error" and refused["ename"] == "ToolDenied"
            assert "big charges are refused" in refused["evalue"], refused["evalue"]
            # A tool that is not live is still answered only from the recording: a new call is refused.
            diverged, _ = run("tools.ledger(5)")
            assert diverged["status"] == "error" and diverged["ename"] == "ReplayDivergence"
    assert charges(count) == ["300", "7"]  # cell 2 replayed live, then the allowed fix; never 5000 or ledger
    nb = nbformat.read(output, as_version=4)
    assert [c.source for c in nb.cells][-3:] == ["print(tools.charge(7))", "tools.charge(5000)", "tools.ledger(5)"]
    assert calls_of(output)[-3:-1] == [[("charge", {"amount": 7}, "allow")], [("charge", {"amount": 5000}, "deny")]]
    assert nb.cells[-2].metadata.cellgate.calls[0]["rule"] == "tools.charge.rules[0] (big charges are refused)"
    verified = cellgate("verify", str(output), count=count)
    assert verified.returncode == 0, verified.stdout + verified.stderr
