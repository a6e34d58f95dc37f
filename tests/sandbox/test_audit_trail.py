"""The audit trail survives crashes and shows tampering."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from conftest import COUNTED_TOOLS as COUNTED
from conftest import cellgate


def programs(tmp_path: Path, *sources: str) -> list[str]:
    paths = []
    for index, source in enumerate(sources):
        path = tmp_path / f"cell{index}.py"
        path.write_text(source)
        paths.append(str(path))
    return paths


@pytest.fixture()
def run(tmp_path: Path, runsc: object):
    """A finished run with three cells, calls and a large result."""
    notebook = tmp_path / "run.ipynb"
    done = cellgate("exec", *programs(tmp_path, "total = 0\nprint('start')",
                                      "print(tools.charge(5))\nrows = tools.ledger(500)",
                                      "print(len(rows), sum(r['amount'] for r in rows))"),
                    "--tools", str(COUNTED), "--notebook", str(notebook),
                    env={"CELLGATE_TEST_COUNT_FILE": str(tmp_path / "count")})
    assert done.returncode == 0, done.stderr
    return notebook


def test_verify_passes_on_an_untouched_run(run: Path) -> None:
    done = cellgate("verify", str(run))
    assert done.returncode == 0 and "hash chain is intact" in done.stdout
    blob = json.loads(run.read_text())["cells"][1]["metadata"]["cellgate"]["calls"][1]["result_blob"]
    assert (run.parent / blob).is_file()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(("old", "new", "place"), [
    ('"start\\n"', '"stars\\n"', "cell 1 differs from the journal in its outputs"),
    ('"amount": 5', '"amount": 6', "cell 2 differs from the journal in its calls"),
    ("sum(r['amount'] for r in rows)", "sum(r['amount'] for r in rowz)", "cell 3 differs from the journal in its source"),
])
def test_verify_names_the_edited_place_in_the_notebook(run: Path, old: str, new: str, place: str) -> None:
    edit(run, old, new)
    done = cellgate("verify", str(run))
    assert done.returncode == 1
    assert place in done.stderr


def test_verify_names_the_edited_journal_record(run: Path) -> None:
    journal = run.with_name("run.journal.jsonl")
    lines = journal.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "call-finished")
    lines[index] = lines[index].replace('"charged 5"', '"charged 9"')
    journal.write_text("\n".join(lines) + "\n")
    done = cellgate("verify", str(run))
    assert done.returncode == 1 and f"journal record {index + 1} does not match its hash" in done.stderr
    del lines[index]
    journal.write_text("\n".join(lines) + "\n")
    done = cellgate("verify", str(run))
    assert done.returncode == 1 and f"journal record {index + 1}" in done.stderr and "deleted" in done.stderr


def test_show_summarises_the_run(run: Path) -> None:
    done = cellgate("show", str(run))
    assert done.returncode == 0
    assert "totals: 3 cells (0 not ok), 2 calls (allow: 2)" in done.stdout
    assert "charge decision=allow ok" in done.stdout


@pytest.mark.parametrize(("failpoint", "charged", "status"), [
    ("after-intent", 0, "needs-reconciliation"),   # (a) intent recorded, tool not yet run
    ("after-call", 1, "needs-reconciliation"),     # (b) tool ran, result not yet recorded
])
def test_host_killed_around_a_call_recovers_without_running_it_twice(
        tmp_path: Path, runsc: object, failpoint: str, charged: int, status: str) -> None:
    notebook = tmp_path / "run.ipynb"
    count = tmp_path / "count"
    done = cellgate("exec", *programs(tmp_path, "before = 'kept'", "print(tools.charge(7))", "print('never')"),
                    "--tools", str(COUNTED), "--notebook", str(notebook),
                    env={"CELLGATE_TEST_COUNT_FILE": str(count), "CELLGATE_FAILPOINT": failpoint})
    assert done.returncode == -9  # SIGKILL
    journal = tmp_path / "run.journal.jsonl"
    recovered = cellgate("recover", str(journal))
    assert recovered.returncode == 0, recovered.stderr
    assert "2 cells (ok, killed)" in recovered.stdout
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    first, second = nb.cells
    assert first.source == "before = 'kept'" and first.metadata.cellgate.status == "ok"
    (call,) = second.metadata.cellgate.calls
    assert call["outcome"] == status and call["tool"] == "charge" and call["idempotency_key"]
    assert "reconcile it before retrying" in call["error"]["message"]
    assert (count.read_text().splitlines() if count.exists() else []) == ["7"] * charged
    assert cellgate("verify", str(notebook)).returncode == 0
    # Recovering again changes nothing and runs nothing.
    assert cellgate("recover", str(journal)).returncode == 0
    assert (count.read_text().splitlines() if count.exists() else []) == ["7"] * charged


def test_host_killed_while_writing_the_notebook(tmp_path: Path, runsc: object) -> None:
    notebook = tmp_path / "run.ipynb"
    # The 2nd notebook write is the one after cell 1 ends (the 1st is the empty notebook at start).
    done = cellgate("exec", *programs(tmp_path, "print('one')", "print('two')"), "--notebook", str(notebook),
                    env={"CELLGATE_FAILPOINT": "notebook-write:2"})
    assert done.returncode == -9
    before = nbformat.read(notebook, as_version=4)  # the previous version, whole
    assert before.cells == []
    assert list(tmp_path.glob(".run.ipynb.*.tmp"))  # the interrupted write
    recovered = cellgate("recover", str(tmp_path / "run.journal.jsonl"))
    assert recovered.returncode == 0 and "removed an unfinished notebook write" in recovered.stderr
    nb = nbformat.read(notebook, as_version=4)
    assert [c.source for c in nb.cells] == ["print('one')"] and nb.cells[0].outputs[0]["text"] == "one\n"
    assert not list(tmp_path.glob(".run.ipynb.*.tmp"))


def test_torn_journal_tail_is_ignored(run: Path) -> None:
    journal = run.with_name("run.journal.jsonl")
    with open(journal, "a") as handle:
        handle.write('{"seq": 999, "event": "cell-sent", "sour')
    recovered = cellgate("recover", str(journal), "-o", str(run.with_name("again.ipynb")))
    assert recovered.returncode == 0 and "cut short" in recovered.stderr
    assert len(nbformat.read(run.with_name("again.ipynb"), as_version=4).cells) == 3
