"""Load on one gate process (issue 33): N sessions started at once, then each makes one 1 MB call at once.

    .venv/bin/python benchmarks/load.py --sessions 50

Prints how many cells were correct (each must print the 10,000 rows of Northwind's October), the start rate, the
load's wall time against one session's call times N over the cores, and the host memory the idle sessions took
(the ``free`` delta over the N sessions, per session). ``run.py``'s ``load`` section runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cellgate.gate import Session

ROOT = Path(__file__).resolve().parent.parent
NORTHWIND = ROOT / "examples" / "northwind"
CELL = "rows = tools.list_orders('2026-10')\nprint(len(rows))"


def used_mb() -> float:
    """Host memory in use (MemTotal - MemAvailable), as ``free`` shows it."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) / 1024


async def timed(coroutine: Any) -> float:
    started = time.perf_counter()
    await coroutine
    return time.perf_counter() - started


async def load(folder: Path, count: int, platform: str | None = None) -> dict[str, Any]:
    """``platform``: gVisor's (systrap, ptrace); None: the default."""
    tools = folder / "tools.py"
    shutil.copy(NORTHWIND / "tools.py", tools)
    config = folder / "cellgate.toml"
    shutil.copy(NORTHWIND / "cellgate.toml", config)
    if platform:
        config.write_text(config.read_text() + f'\n[sandbox]\nplatform = "{platform}"\n')
    warm = Session(config=str(config), tools=[str(tools)], notebook=folder / "warm.ipynb", cwd=folder)
    await warm.start()
    one = []
    for _ in range(3):  # one session alone: the baseline of a call
        one.append(await timed(warm.execute(CELL)))
    await warm.shutdown()
    before = used_mb()
    sessions = [Session(config=str(config), tools=[str(tools)], notebook=folder / f"s{i}.ipynb", cwd=folder)
                for i in range(count)]
    started = time.perf_counter()
    outcomes = await asyncio.gather(*(s.start() for s in sessions), return_exceptions=True)
    start_wall = time.perf_counter() - started
    up = [s for s, outcome in zip(sessions, outcomes, strict=True) if not isinstance(outcome, BaseException)]
    idle_mb = (used_mb() - before) / max(1, len(up))
    try:
        started = time.perf_counter()
        results = await asyncio.gather(*(s.execute(CELL) for s in up), return_exceptions=True)
        wall = time.perf_counter() - started
    finally:
        await asyncio.gather(*(s.shutdown() for s in sessions), return_exceptions=True)
    correct = [r for r in results if not isinstance(r, BaseException) and r.ok and r.stdout == "10000\n"]
    errors = sorted({(r.error or {}).get("evalue", "")[:120] if not isinstance(r, BaseException) else repr(r)[:120]
                     for r in results if r not in correct})
    return {"sessions": count, "started": len(up), "start_errors": sorted({repr(o)[:160] for o in outcomes
                                                                           if isinstance(o, BaseException)}),
            "correct": len(correct), "errors": errors, "starts_per_s": len(up) / start_wall,
            "wall_s": wall, "one_call_s": statistics.median(one), "cores": os.cpu_count() or 1,
            "idle_mb_per_session": idle_mb}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--platform", choices=("systrap", "ptrace"), default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(load(Path(tmp), args.sessions, args.platform))
    ideal = out["one_call_s"] * out["sessions"] / out["cores"]
    print(f"{out['correct']}/{out['sessions']} cells correct ({out['started']} started); "
          f"starts: {out['starts_per_s']:.2f}/s; the load's wall {out['wall_s']:.1f} s vs one call "
          f"{out['one_call_s']:.3f} s x {out['sessions']} / {out['cores']} cores = {ideal:.1f} s "
          f"(ratio {out['wall_s'] / ideal:.2f}); host memory per idle session {out['idle_mb_per_session']:.0f} MB")
    for error in out["errors"] + out["start_errors"]:
        print("  error:", error)


if __name__ == "__main__":
    main()
