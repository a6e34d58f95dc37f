"""`cellgate verify` on a real run whose journal lost its tail, or whose notebook gained or lost a cell.

Each test tampers with a copy of one run recorded in gVisor and runs the real
CLI (``python -m cellgate.gate verify``): it must exit 1 and say where, the
journal record or the notebook cell. The untouched copy verifies, so each
failure is the tampering's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from cellgate.gate.audit.journal import read_journal

pytestmark = pytest.mark.gvisor

COUNTED = Path(__file__).resolve().parents[1] / "tools" / "counted.py"
SOURCES = ("total = 0\nprint('start')", "rows = tools.ledger(3)\nprint(len(rows))", "print(tools.charge(5))")


def cellgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "cellgate.gate", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    # whitespace folded: the terminal console wraps long messages
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, " ".join(done.stderr.split()))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, runsc: object) -> Path:
    """A finished run of three cells (the second and third make gated calls); verify passes on it."""
    folder = tmp_path_factory.mktemp("tampering") / "recorded"
    folder.mkdir()
    programs = []
    for index, source in enumerate(SOURCES, start=1):
        program = folder / f"cell{index}.py"
        program.write_text(source)
        programs.append(str(program))
    done = cellgate("exec", *programs, "--tools", str(COUNTED), "--notebook", str(folder / "run.ipynb"),
                    env={"CELLGATE_TEST_COUNT_FILE": str(folder.parent / "count")})
    assert done.returncode == 0, done.stderr
    for program in programs:
        Path(program).unlink()
    done = cellgate("verify", str(folder / "run.ipynb"))
    assert done.returncode == 0, done.stderr
    return folder / "run.ipynb"


@pytest.fixture()
def run(recorded: Path, tmp_path: Path) -> Path:
    """A copy of the recorded run to tamper with."""
    folder = tmp_path / "run"
    shutil.copytree(recorded.parent, folder)
    return folder / recorded.name


def label(source: str) -> str:
    return f"(code, {source.splitlines()[0]!r})"


@pytest.mark.parametrize("event", ["call-finished", "cell-ended"])
def test_a_journal_cut_before_its_last_call_or_cell_end_names_the_records_and_the_cell(run: Path, event: str) -> None:
    journal = run.with_name("run.journal.jsonl")
    records = read_journal(journal).records
    last = max(r["seq"] for r in records if r["event"] == event)
    assert [r["event"] for r in records[last - 1:]].count("cell-ended") == 1  # the cut takes the last cell's end
    kept = journal.read_text().splitlines(keepends=True)[:last - 1]
    journal.write_text("".join(kept))
    done = cellgate("verify", str(run))
    assert done.returncode == 1, done.stdout
    end = records[last - 2]
    assert (f"the notebook names journal record {len(records)}, but the journal ends at record {last - 1} "
            f"({end['event']}): records {last} to {len(records)} are missing; the journal was cut short or "
            "replaced") in done.stderr
    assert (f"the notebook has 3 cells, the journal 2: the notebook's cell 3 {label(SOURCES[2])} is not in the "
            "journal (as far as the journal goes)") in done.stderr


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_deleted_notebook_cell_is_named(run: Path, index: int) -> None:
    nb = json.loads(run.read_text())
    del nb["cells"][index]
    run.write_text(json.dumps(nb, indent=1))
    done = cellgate("verify", str(run))
    assert done.returncode == 1, done.stdout
    assert (f"the notebook has 2 cells, the journal 3: cell {index + 1} of the journal {label(SOURCES[index])} "
            "is missing from the notebook") in done.stderr


@pytest.mark.parametrize("index", [0, 1, 3])
def test_an_added_notebook_cell_is_named(run: Path, index: int) -> None:
    nb = nbformat.read(run, as_version=4)
    added = nbformat.v4.new_code_cell("print('not run')")
    added.metadata["cellgate"] = dict(nb.cells[-1].metadata.cellgate)  # looks like a recorded cell
    nb.cells.insert(index, added)
    nbformat.write(nb, run)
    done = cellgate("verify", str(run))
    assert done.returncode == 1, done.stdout
    assert (f"the notebook has 4 cells, the journal 3: the notebook's cell {index + 1} {label(added.source)} "
            "is not in the journal") in done.stderr


def test_a_copied_cell_added_after_its_original_is_named(run: Path) -> None:
    """A duplicate of a recorded cell, metadata and all: the second of the two is the one not in the journal."""
    nb = json.loads(run.read_text())
    copy = json.loads(json.dumps(nb["cells"][1]))
    copy["id"] = "copied"  # cell ids must be unique in a valid notebook
    nb["cells"].insert(2, copy)
    run.write_text(json.dumps(nb, indent=1))
    done = cellgate("verify", str(run))
    assert done.returncode == 1, done.stdout
    assert (f"the notebook has 4 cells, the journal 3: the notebook's cell 3 {label(SOURCES[1])} "
            "is not in the journal") in done.stderr


def test_two_deleted_cells_say_where_the_notebook_and_the_journal_part(run: Path) -> None:
    nb = json.loads(run.read_text())
    del nb["cells"][0:2]
    run.write_text(json.dumps(nb, indent=1))
    done = cellgate("verify", str(run))
    assert done.returncode == 1, done.stdout
    assert (f"the notebook has 1 cells, the journal 3; they differ from cell 1 on: the notebook's cell 1 "
            f"{label(SOURCES[2])} is not the journal's {label(SOURCES[0])} (it differs in its source)") in done.stderr


def test_cells_cut_from_the_notebooks_end_are_all_named(run: Path) -> None:
    nb = json.loads(run.read_text())
    del nb["cells"][1:]
    run.write_text(json.dumps(nb, indent=1))
    done = cellgate("verify", str(run))
    assert done.returncode == 1, done.stdout
    assert ("the notebook has 1 cells, the journal 3: the first 1 agree, and cells 2 to 3 are only in the "
            "journal") in done.stderr
