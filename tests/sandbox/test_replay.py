"""`cellgate replay`: recorded results, no side effects, the failure reproduced, a kernel left to fix it in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nbformat
import pytest
from conftest import CELLGATE, interactive_replay
from conftest import COUNTED_TOOLS as COUNTED
from conftest import cellgate as run_cellgate

CELLS = ["rows = tools.ledger(300)", "receipt = tools.charge(len(rows))", "print(rows[0]['customer'])"]


def cellgate(*args: str, count: Path) -> subprocess.CompletedProcess[str]:
    return run_cellgate(*args, env={"CELLGATE_TEST_COUNT_FILE": str(count)})


@pytest.fixture()
def recorded(tmp_path: Path, runsc: object) -> tuple[Path, Path]:
    count = tmp_path / "count"
    programs = []
    for index, source in enumerate(CELLS):
        programs.append(tmp_path / f"c{index}.py")
        programs[-1].write_text(source)
    notebook = tmp_path / "run.ipynb"
    done = cellgate("exec", *map(str, programs), "--tools", str(COUNTED), "--notebook", str(notebook), count=count)
    assert done.returncode == 1 and "KeyError: 'customer'" in done.stderr
    assert count.read_text().splitlines() == ["ledger", "300"]
    count.write_text("")
    return notebook, count


def test_replay_answers_from_the_recording_and_reproduces_the_failure(recorded) -> None:
    notebook, count = recorded
    done = cellgate("replay", str(notebook), count=count)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[:4] == [
        "cell 1: recorded ok, replayed ok", "cell 2: recorded ok, replayed ok",
        "cell 3: recorded error, replayed error",
        "the recorded failure of cell 3 (KeyError: 'customer') reproduced"]
    assert "live calls: 0" in done.stdout
    assert count.read_text() == ""  # no tool ran
    replayed = nbformat.read(notebook.with_name("run.replay.ipynb"), as_version=4)
    assert replayed.metadata.cellgate.replay_of["notebook"] == str(notebook)
    assert [c.metadata.cellgate.calls[0]["decision"] for c in replayed.cells[:2]] == ["replayed", "replayed"]


def test_live_tools_make_exactly_the_expected_live_calls(recorded) -> None:
    notebook, count = recorded
    done = cellgate("replay", str(notebook), "--live", "ledger", "--tools", str(COUNTED),
                    "--notebook", str(notebook.with_name("live.ipynb")), count=count)
    assert done.returncode == 0 and "live calls: 1" in done.stdout
    assert count.read_text().splitlines() == ["ledger"]


def test_a_call_the_recording_does_not_have_is_a_divergence(tmp_path: Path, runsc: object) -> None:
    count = tmp_path / "count"
    program = tmp_path / "p.py"
    program.write_text("import random\nprint(tools.charge(random.randint(1, 10**9)))")
    notebook = tmp_path / "run.ipynb"
    assert cellgate("exec", str(program), "--tools", str(COUNTED), "--notebook", str(notebook), count=count).returncode == 0
    done = cellgate("replay", str(notebook), count=count)
    assert done.returncode == 1
    assert "ReplayDivergence: replay diverged in cell 1 at call 1: the recording has charge({\"amount\": " in done.stdout
    assert "but the program called charge({\"amount\": " in done.stdout
    assert len(count.read_text().splitlines()) == 1  # only the original run charged


def test_interactive_replay_leaves_a_kernel_to_fix_the_failed_cell(recorded) -> None:
    notebook, count = recorded
    output = notebook.with_name("interactive.ipynb")
    with subprocess.Popen([*CELLGATE, "replay", str(notebook), "--interactive", "--notebook", str(output)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "CELLGATE_TEST_COUNT_FILE": str(count)}) as replay, \
            interactive_replay(replay) as run:
        content, out = run("print(len(rows), receipt)")
        assert content["status"] == "ok" and out == "300 charged 300\n", (content, out)
        content, out = run("print(rows[0]['amount'] + rows[1]['amount'])")
        assert content["status"] == "ok" and out == "3\n", (content, out)
    nb = nbformat.read(output, as_version=4)
    assert [c.source for c in nb.cells][-2:] == ["print(len(rows), receipt)",
                                                  "print(rows[0]['amount'] + rows[1]['amount'])"]
    assert count.read_text() == ""


def test_replay_stops_at_the_failed_cell_and_runs_none_after_it(tmp_path: Path, runsc: object,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from cellgate.gate.testing import BlockingSession

    count = tmp_path / "count"
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(count))
    notebook = tmp_path / "run.ipynb"
    with BlockingSession(tools=[COUNTED], notebook=notebook, cwd=tmp_path) as box:
        assert box.execute("print(tools.charge(1))").ok
        assert box.execute("1 / 0").status == "error"
        assert box.execute("print(tools.charge(3))").ok  # the run went on after its failure
    assert count.read_text().splitlines() == ["1", "3"]
    count.write_text("")
    # With charge live, any cell replayed after the failure would show in the count.
    done = cellgate("replay", str(notebook), "--live", "charge", "--tools", str(COUNTED), count=count)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[:3] == [
        "cell 1: recorded ok, replayed ok", "cell 2: recorded error, replayed error",
        "the recorded failure of cell 2 (ZeroDivisionError: division by zero) reproduced"]
    assert "cell 3" not in done.stdout
    assert count.read_text() == "1\n"  # cell 1's live charge ran again; cell 3's never did
    replayed = nbformat.read(notebook.with_name("run.replay.ipynb"), as_version=4)
    assert [c.source for c in replayed.cells if c.cell_type == "code"] == ["print(tools.charge(1))", "1 / 0"]
