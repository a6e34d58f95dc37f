"""A new session never writes over an earlier session's record: a path the user chose is refused, a name
cellgate chooses is numbered on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nbformat
import pytest
from conftest import cellgate

from cellgate.gate import Pool, RecordExists, Session
from cellgate.gate.audit.recorder import journal_path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, runsc: object) -> Path:
    """One finished run, made by `cellgate exec --notebook runs/same.ipynb`."""
    notebook = tmp_path_factory.mktemp("reuse") / "runs" / "same.ipynb"
    done = cellgate("exec", "-", "--notebook", str(notebook), stdin="print('first session')")
    assert done.returncode == 0, done.stderr
    return notebook


def test_exec_refuses_a_notebook_path_that_holds_a_record_and_the_record_still_verifies(recorded: Path) -> None:
    journal_before = journal_path(recorded).read_bytes()
    done = cellgate("exec", "-", "--notebook", str(recorded), stdin="print('second session')")
    stderr = " ".join(done.stderr.split())  # the console wraps long lines
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"the audit notebook {recorded} is taken: same.ipynb, same.journal.jsonl" in stderr
    assert "choose another path (cellgate exec --notebook, Session(notebook=...))" in stderr
    assert done.stdout == ""  # the program never ran
    assert journal_path(recorded).read_bytes() == journal_before
    checked = cellgate("verify", str(recorded))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [c.source for c in nbformat.read(recorded, as_version=4).cells] == ["print('first session')"]


def test_session_refuses_it_too(recorded: Path) -> None:
    async def start() -> None:
        async with Session(notebook=recorded):
            raise AssertionError("the session started on an earlier record")

    with pytest.raises(RecordExists, match="is taken") as caught:
        asyncio.run(start())
    assert caught.value.path == recorded


def test_a_pool_numbers_on_past_an_earlier_pools_records(tmp_path: Path, runsc: object) -> None:
    earlier = tmp_path / "pool-1.ipynb"
    earlier.write_text("an earlier pool's notebook")
    journal_path(earlier).write_text("an earlier pool's journal")

    async def scenario() -> Path:
        async with Pool(1, notebook_dir=tmp_path) as pool:
            session = await pool.acquire()
            await session.execute("print(1)")
            path = session.notebook_path
            await pool.release(session)
            return path

    assert asyncio.run(scenario()) == tmp_path / "pool-2.ipynb"
    assert earlier.read_text() == "an earlier pool's notebook"
    assert journal_path(earlier).read_text() == "an earlier pool's journal"


def test_replay_numbers_its_own_notebook_on_past_an_earlier_replay(recorded: Path) -> None:
    first, second = (cellgate("replay", str(recorded)) for _ in range(2))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert f"replay notebook: {recorded.with_name('same.replay.ipynb')}" in first.stdout
    assert f"replay notebook: {recorded.with_name('same.replay-2.ipynb')}" in second.stdout
    for name in ("same.replay.ipynb", "same.replay-2.ipynb"):
        checked = cellgate("verify", str(recorded.with_name(name)))
        assert checked.returncode == 0, checked.stdout + checked.stderr
