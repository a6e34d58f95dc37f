"""``cellgate exec --trial``: the notebook asked for is where the record starts (issue 43, item 1). Each kept trial's
session goes on in a fork's notebook; ``cellgate show``, ``show --json`` and ``report`` follow the ``continued_in``
chain from the asked-for notebook and give every kept cell in order, the discarded trial noted; the forks' names
stay short (``tr.fork-N``, numbered per root notebook). A tampered link is said and not followed. Real gVisor
sandboxes and checkpoints (one exec run shared by the module's tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from cellgate.gate.review import show as show_module
from cellgate.gate.review.run_view import title
from tests.conftest import cellgate

PROGRAMS = {"load.py": "total = 1\nprint('loaded', total)\n",
            "step.py": "total = total + 1\nprint('step', total)\n",
            "bad.py": "total = 100\n1 / 0\n",
            "last.py": "total = total + 10\nprint('last', total)\n"}
KEPT = [PROGRAMS["load.py"], PROGRAMS["step.py"], PROGRAMS["last.py"]]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    folder = tmp_path_factory.mktemp("trial")
    for name, code in PROGRAMS.items():
        (folder / name).write_text(code)
    (folder / "runs").mkdir()
    done = cellgate("exec", "--trial", *PROGRAMS, "--notebook", "runs/tr.ipynb", cwd=folder)
    return folder / "runs", done.stdout, done.stderr + f"\n(exit {done.returncode})"


def copy_of(ran: tuple[Path, str, str], tmp_path: Path) -> Path:
    """The run's notebooks, journals and blobs, copied to be tampered with."""
    shutil.copytree(ran[0], tmp_path / "runs")
    return tmp_path / "runs"


def sources(cells: list[dict]) -> list[str]:
    return [c["title"] for c in cells]


def test_each_program_is_tried_and_forks_are_named_short(ran: tuple[Path, str, str]) -> None:
    runs, stdout, stderr = ran
    assert stdout == "loaded 1\nstep 2\nlast 12\n", stderr  # the 4th ran, on the session as it was before bad.py
    assert "(exit 1)" in stderr  # a trial was discarded
    names = sorted(p.name for p in runs.glob("*.ipynb"))
    assert names == ["tr.fork-1.ipynb", "tr.fork-2.ipynb", "tr.fork-3.ipynb", "tr.fork-4.ipynb", "tr.ipynb"], names
    assert cellgate("verify", str(runs / "tr.ipynb")).returncode == 0


def test_show_follows_the_chain_from_the_asked_for_notebook(ran: tuple[Path, str, str]) -> None:
    runs = ran[0]
    data = json.loads(cellgate("show", "--json", "tr.ipynb", cwd=runs).stdout)
    assert [c["notebook"] for c in data["continued_in"]] == ["tr.fork-1.ipynb", "tr.fork-2.ipynb", "tr.fork-4.ipynb"]
    cells = data["cells"] + [c for part in data["continued_in"] for c in part["cells"]]
    assert [c["status"] for c in cells] == ["ok", "ok", "ok"]
    assert sources(cells) == [title(code) for code in KEPT]
    assert data["chain_problem"] is None
    text = cellgate("show", "tr.ipynb", cwd=runs, env={"COLUMNS": "200"}).stdout
    at = [text.index(s) for s in ("total = 1", "total = total + 1", "tr.fork-3.ipynb", "total = total + 10")]
    assert at == sorted(at), text  # every kept cell in order, the discarded trial noted where it was tried
    assert "was discarded" in " ".join(text.split())  # the note of the discarded trial
    assert "totals: 3 cells (0 not ok)" in text  # the chain's cells, not the asked-for notebook's none
    assert "total = 100" not in text  # the discarded program's cell is in its own notebook, named, not shown
    assert "read in order: tr.ipynb -> tr.fork-1.ipynb -> tr.fork-2.ipynb -> tr.fork-4.ipynb (3 cells)" in text


def test_report_follows_the_chain(ran: tuple[Path, str, str], tmp_path: Path) -> None:
    runs = ran[0]
    out = tmp_path / "report.html"
    done = cellgate("report", str(runs / "tr.ipynb"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    at = [page.index(s) for s in ("The session goes on in tr.fork-1.ipynb", "The session goes on in tr.fork-2.ipynb",
                                  "The session goes on in tr.fork-4.ipynb")]
    assert at == sorted(at)
    assert page.count("<span class=\"mi\">10</span>") == 1 and "The chain stops" not in page


def test_a_link_naming_a_path_elsewhere_is_said_and_not_followed(ran: tuple[Path, str, str], tmp_path: Path) -> None:
    runs = copy_of(ran, tmp_path)
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(runs / "tr.fork-1.ipynb", tmp_path / "elsewhere" / "tr.fork-1.ipynb")
    nb = nbformat.read(runs / "tr.ipynb", as_version=4)
    ended = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("cellgate", {}).get("continued_in")]
    ended[-1].metadata["cellgate"]["continued_in"] = "../elsewhere/tr.fork-1.ipynb"
    nbformat.write(nb, runs / "tr.ipynb")
    data = json.loads(cellgate("show", "--json", "tr.ipynb", cwd=runs).stdout)
    assert data["continued_in"] == []
    assert "not a plain notebook name" in data["chain_problem"], data["chain_problem"]
    text = " ".join(cellgate("show", "tr.ipynb", cwd=runs).stdout.split())
    assert "the chain stops:" in text and "total = total + 1" not in text


def test_a_link_the_next_notebook_does_not_answer_is_not_followed(ran: tuple[Path, str, str], tmp_path: Path) -> None:
    runs = copy_of(ran, tmp_path)
    nb = nbformat.read(runs / "tr.fork-2.ipynb", as_version=4)
    came = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("cellgate", {}).get("continued_from")]
    came[0].metadata["cellgate"]["continued_from"] = "other.ipynb"
    nbformat.write(nb, runs / "tr.fork-2.ipynb")
    data = json.loads(cellgate("show", "--json", "tr.ipynb", cwd=runs).stdout)
    assert [c["notebook"] for c in data["continued_in"]] == ["tr.fork-1.ipynb"]
    assert "does not say it continues tr.fork-1.ipynb" in data["chain_problem"], data["chain_problem"]
    (runs / "tr.fork-1.ipynb").unlink()  # a missing link is said too
    data = json.loads(cellgate("show", "--json", "tr.ipynb", cwd=runs).stdout)
    assert data["continued_in"] == [] and "cannot be read" in data["chain_problem"], data["chain_problem"]


def test_the_chain_is_followed_a_bounded_length(ran: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    runs = ran[0]
    monkeypatch.setattr(show_module, "CHAIN_READ", 2)
    path = runs / "tr.ipynb"
    chain, problem = show_module.continued_chain(path, show_module.read(path))
    assert [p.name for p, _ in chain] == ["tr.fork-1.ipynb", "tr.fork-2.ipynb"]
    assert problem is not None and "past 2 notebooks" in problem and "cellgate show tr.fork-4.ipynb" in problem
