"""Budgets belong to a lineage (issue 42, finding 2): ``max_calls_per_session = 3`` holds across a parent and its
forks, across kept trials, across ``Pool.from_session`` and across a resume in another process; a fork's share is
never larger than what its parent has left, and each fork's record names the lineage it draws on.

Real gVisor sandboxes and checkpoints; the resume runs in a new host process.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest

from cellgate.gate import Session
from cellgate.gate.ext import lineage_of
from cellgate.gate.session import live
from cellgate.gate.session.pool import Pool
from tests.conftest import SAMPLE_TOOLS

CALL = ("try:\n    tools.echo(text='x'); print('ok')\nexcept Exception as exc:\n"
        "    print('refused' if 'budget of 3 calls is used up' in str(exc) else f'other: {exc}')")


# A fork given 1 call of the 2 its parent has left is refused for its share, not the lineage's whole budget.
SHARE_CALL = CALL.replace("'budget of 3 calls", "\"this fork's share of the max_calls_per_session budget of 1 calls")
SHARE_CALL = SHARE_CALL.replace("is used up' in", "is used up\" in")


def config(folder: Path) -> Path:
    path = folder / "cellgate.toml"
    path.write_text(f"""
[tools]
modules = [{json.dumps(str(SAMPLE_TOOLS))}]
[policy]
default = "allow"
max_calls_per_session = 3
""")
    return path


async def call(session: Session) -> str:
    return (await session.execute(CALL)).stdout.strip()


def test_a_parent_and_two_forks_make_three_calls_in_all(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        async with Session(config=config(tmp_path), notebook=tmp_path / "parent.ipynb", cwd=tmp_path) as parent:
            seen = [await call(parent), await call(parent)]
            forks = await parent.fork(2)
            try:
                seen += [await call(forks[0]), await call(forks[1]), await call(forks[0]), await call(parent)]
            finally:
                await asyncio.gather(*(f.shutdown() for f in forks))
            return seen

    assert asyncio.run(scenario()) == ["ok", "ok", "ok", "refused", "refused", "refused"]
    named = nbformat.read(tmp_path / "parent.fork-1.ipynb", as_version=4).metadata.cellgate["forked_from"]
    assert named["budget"]["left"] == 1 and len(named["budget"]["lineage"]) == 32


def test_a_fork_gets_a_smaller_share_never_a_larger_one(tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with Session(config=config(tmp_path), notebook=tmp_path / "parent.ipynb", cwd=tmp_path) as parent:
            assert await call(parent) == "ok"
            with pytest.raises(ValueError, match="more than its parent has left"):
                await parent.fork(1, budget=3)
            [fork] = await parent.fork(1, budget=1)
            try:
                seen = [await call(fork), (await fork.execute(SHARE_CALL)).stdout.strip()]
                return {"seen": seen, "parent": await call(parent), "lineage": lineage_of(parent).id}
            finally:
                await fork.shutdown()

    result = asyncio.run(scenario())
    assert result["seen"] == ["ok", "refused"] and result["parent"] == "ok"  # the fork's share: 1 of the 2 left
    named = nbformat.read(tmp_path / "parent.fork-1.ipynb", as_version=4).metadata.cellgate["forked_from"]
    assert named["budget"] == {"lineage": result["lineage"], "share": 1, "left": 1}


def test_three_kept_trials_and_one_more_cell_make_three_calls(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        async with Session(config=config(tmp_path), notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            seen = []
            for _ in range(3):
                trial = await session.trial(CALL)
                seen.append(trial.result.stdout.strip())
                await trial.keep()
            return [*seen, await call(session)]

    assert asyncio.run(scenario()) == ["ok", "ok", "ok", "refused"]


def test_a_pool_from_a_session_shares_its_budgets(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        async with Session(config=config(tmp_path), notebook=tmp_path / "loaded.ipynb", cwd=tmp_path) as loaded:
            seen = [await call(loaded)]
            pool = await Pool.from_session(loaded, 2, path=tmp_path / "pool.checkpoint")
            members: list[Session] = []
            try:
                members += [await pool.acquire(), await pool.acquire()]
                first, second = members
                seen += [await call(first), await call(second), await call(first), await call(loaded)]
            finally:
                await asyncio.gather(*(pool.release(member) for member in members))  # acquired: the caller's
                await pool.close()
            return seen

    assert asyncio.run(scenario()) == ["ok", "ok", "ok", "refused", "refused"]


RESUME = """
import asyncio, sys
from pathlib import Path
from cellgate.gate import Session

async def main(folder):
    folder = Path(folder)
    async with Session.resume(folder / "paused", config=folder / "cellgate.toml", cwd=folder) as session:
        for _ in range(2):
            print((await session.execute({call!r})).stdout.strip())

asyncio.run(main(sys.argv[1]))
"""


def test_a_session_resumed_in_another_process_draws_on_what_its_lineage_left(tmp_path: Path) -> None:
    async def pause() -> list[str]:
        session = await Session(config=config(tmp_path), notebook=tmp_path / "run.ipynb", cwd=tmp_path).start()
        seen = [await call(session)]
        [fork] = await session.fork(1)  # its calls are the lineage's, not in the paused session's own record
        try:
            seen.append(await call(fork))
        finally:
            await fork.shutdown()
        await session.checkpoint(tmp_path / "paused")
        return seen

    assert asyncio.run(pause()) == ["ok", "ok"]
    manifest = json.loads((tmp_path / "paused" / live.MANIFEST).read_text())
    assert len(manifest["lineage"]["id"]) == 32
    resumed = subprocess.run([sys.executable, "-c", textwrap.dedent(RESUME.format(call=CALL)), str(tmp_path)],
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.split() == ["ok", "refused"]
