"""Load held (issue 33): fifty sessions of one gate process, each making a 1 MB tool call at the same moment, all
get their result (the calls queue for the gate's tool threads, and a call's deadline measures its own run). Not
timed: benchmarks/load.py measures it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from cellgate.gate import Session

NORTHWIND = Path(__file__).resolve().parents[2] / "examples" / "northwind"
SESSIONS = 50

pytestmark = pytest.mark.xdist_group("load")  # its fifty sandboxes are a worker's whole share of this machine


def test_fifty_sessions_each_making_a_1_mb_call_at_once_all_succeed(tmp_path: Path) -> None:
    shutil.copy(NORTHWIND / "tools.py", tmp_path / "tools.py")
    shutil.copy(NORTHWIND / "cellgate.toml", tmp_path / "cellgate.toml")

    async def run() -> list[object]:
        sessions = [Session(config=str(tmp_path / "cellgate.toml"), notebook=tmp_path / f"s{i}.ipynb", cwd=tmp_path)
                    for i in range(SESSIONS)]
        try:
            await asyncio.gather(*(s.start() for s in sessions))
            cell = "rows = tools.list_orders('2026-10')\nimport json\nprint(len(rows), len(json.dumps(rows)) > 900_000)"
            return list(await asyncio.gather(*(s.execute(cell) for s in sessions), return_exceptions=True))
        finally:
            await asyncio.gather(*(s.shutdown() for s in sessions), return_exceptions=True)

    results = asyncio.run(run())
    failed = [r if isinstance(r, BaseException) else r.text for r in results
              if isinstance(r, BaseException) or r.stdout != "10000 True\n"]
    assert not failed, failed[:3]
