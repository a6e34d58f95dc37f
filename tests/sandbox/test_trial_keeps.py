"""Kept trials (issue 42, finding 4): the session takes over its fork explicitly, and the record says so truly.

Two trials kept in a row leave a chain of three notebooks, each naming the next (``continued_in``, in the
ending record) and the one before (``continued_from``, in the kept fork's ``session-continued`` record), and
``cellgate verify`` checks each link. A trial whose parent ran cells after it began is not kept (those cells
are not in the fork's kernel): refused, and both the session and the trial stay usable.

Real gVisor sandboxes and checkpoints; ``cellgate verify`` on every record.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate import Session, SessionError
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.audit.verify import verify
from tests.conftest import SAMPLE_TOOLS, cellgate


def records(notebook: Path) -> list[dict[str, Any]]:
    journal = notebook.with_name(notebook.stem + ".journal.jsonl")
    return [json.loads(line) for line in journal.read_text().splitlines()]


def continued(notebook: Path) -> tuple[str | None, str | None]:
    """(continued_from, continued_in) as the notebook's journal says them."""
    found = records(notebook)
    came = [r["continued_from"] for r in found if r["event"] == "session-continued"]
    assert len(came) <= 1, came
    assert found[-1]["event"] == "session-ended", found[-1]
    return (came[0] if came else None), found[-1].get("continued_in")


def test_two_trials_kept_in_a_row_leave_a_chain_every_notebook_verifies_and_names_its_neighbours(
        tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            await session.execute("total = 1")
            notebooks = [session.notebook_path]
            for step in (10, 100):
                trial = await session.trial(f"total = total + {step}; print(total)")
                fork = trial.fork.notebook_path
                assert await trial.keep() is session
                assert session.notebook_path == fork  # the same object drives the fork's kernel and notebook
                notebooks.append(fork)
            after = (await session.execute("print(total)")).stdout
            return {"after": after, "notebooks": notebooks}

    result = asyncio.run(scenario())
    assert result["after"] == "111\n"
    original, first, second = result["notebooks"]
    assert len({original, first, second}) == 3 and all(n.parent == tmp_path for n in (first, second))
    assert continued(original) == (None, first.name)
    assert continued(first) == (original.name, second.name)
    assert continued(second) == (first.name, None)
    for notebook in (original, first, second):
        checked = cellgate("verify", str(notebook))
        assert checked.returncode == 0, checked.stdout + checked.stderr

    # Each link is checked, both ways: a neighbour whose journal is gone is a problem of the notebook naming it.
    for gone, naming in ((second, first), (first, second), (original, first)):
        journal = gone.with_name(gone.stem + ".journal.jsonl")
        journal.rename(tmp_path / "elsewhere.jsonl")
        problems = verify(naming)
        assert len(problems) == 1 and gone.name in problems[0] and "continues" in problems[0], problems
        (tmp_path / "elsewhere.jsonl").rename(journal)
        assert verify(naming) == []


def test_a_trial_whose_parent_ran_cells_after_it_began_is_not_kept_and_both_stay_usable(tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            await session.execute("total = 1")
            trial = await session.trial("total = total + 10; print(total)")
            await session.execute("total = total + 5")  # here, not in the trial's kernel
            with pytest.raises(SessionError) as refused:
                await trial.keep()
            in_trial = (await trial.fork.execute("print(total)")).stdout  # the trial goes on, until discarded
            here = (await session.execute("print(total)")).stdout
            await trial.discard()
            after = (await session.execute("total = total + 1; print(total)")).stdout
            return {"refused": str(refused.value), "in_trial": in_trial, "here": here, "after": after,
                    "decided": trial.decided, "notebook": session.notebook_path}

    result = asyncio.run(scenario())
    assert "ran 1 cell after the trial began" in result["refused"] and "discard" in result["refused"]
    assert (result["in_trial"], result["here"], result["after"]) == ("11\n", "6\n", "7\n")
    assert result["decided"] == "discarded" and result["notebook"] == tmp_path / "run.ipynb"
    original = tmp_path / "run.ipynb"
    events = [r["event"] for r in records(original)]
    assert "trial-kept" not in events and events.count("trial-discarded") == 1
    assert continued(original) == (None, None)
    for notebook in (original, tmp_path / "run.fork-1.ipynb"):
        checked = cellgate("verify", str(notebook))
        assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("name", ["../outside.ipynb", "/etc/passwd", "sub/run.ipynb", "..", "run\x00.ipynb"])
def test_verify_never_follows_a_successor_name_out_of_the_notebooks_folder(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    (tmp_path / "outside.journal.jsonl").write_text("not a journal\n")  # what a followed '..' would reach
    recorder = Recorder(folder / "run.ipynb", {})
    recorder.close("session-ended", continued_in=name)
    problems = verify(folder / "run.ipynb")
    assert len(problems) == 1 and "not a plain notebook name beside it" in problems[0], problems


def test_take_over_moves_every_part_a_session_holds_and_leaves_the_fork_empty() -> None:
    session, fork = Session(), Session()
    for name in vars(fork):  # a part added to Session and not moved by _take_over fails here
        setattr(fork, name, object())
    given, held = dict(vars(fork)), dict(vars(session))
    former = session._take_over(fork)
    assert vars(session) == given and vars(former) == held
    assert (fork.km, fork._client) == (None, None)
    with pytest.raises(SessionError, match="not started"):
        fork.provisioner  # noqa: B018 - nothing left to drive
