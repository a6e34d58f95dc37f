"""Idle sessions on one machine (issue 33): how many sandboxed sessions one host holds, each still answering.

    .venv/bin/python benchmarks/density.py --sessions 300 --platform ptrace

Starts ``--sessions`` sessions of one process, ``--batch`` at a time (starting hundreds at once only queues them
behind each other's start timeouts), stops early if the machine's available memory would fall under
``--reserve-mb`` (so the benchmark never runs the machine out of memory: there is no swap here), then has every
session answer a cell at once and counts the right answers. Prints the host memory per idle session (the ``free``
delta over the sessions) and the CPU the idle sessions burn (machine-wide, over ten seconds): gVisor's systrap
platform polls while idle (~2 % of a core per sandbox with runsc 20240729; fixed upstream in mid-2026), ptrace
does not. ``run.py``'s ``density`` section runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from load import used_mb

from cellgate.gate import Session

CELL = "print(sum(range(10)))"


def available_mb() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(info["MemAvailable"].split()[0]) / 1024


def busy_cores() -> float:
    """CPU time the whole machine has used so far, in core-seconds (user, nice, system, irq, steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


async def density(folder: Path, count: int, platform: str | None, batch: int = 20,
                  reserve_mb: float = 2048) -> dict[str, Any]:
    config = folder / "cellgate.toml"
    config.write_text(f'[sandbox]\nplatform = "{platform}"\n' if platform else "")

    def session(name: str) -> Session:
        return Session(config=str(config), notebook=folder / f"{name}.ipynb", cwd=folder)

    warm = session("warm")  # builds the snapshot image, so that every measured start restores it
    await warm.start()
    await warm.shutdown()
    before = used_mb()
    sessions: list[Session] = []
    failed: list[str] = []
    stopped_early = ""
    started = time.perf_counter()
    try:
        while len(sessions) < count:
            per_session = (used_mb() - before) / len(sessions) if sessions else 100.0
            if available_mb() - per_session * batch < reserve_mb:
                stopped_early = (f"stopped at {len(sessions)}: {available_mb():.0f} MB available, "
                                 f"a batch needs ~{per_session * batch:.0f} MB over the {reserve_mb:.0f} MB reserve")
                break
            wave = [session(f"s{len(sessions) + i}") for i in range(min(batch, count - len(sessions)))]
            outcomes = await asyncio.gather(*(s.start() for s in wave), return_exceptions=True)
            for s, outcome in zip(wave, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    failed.append(repr(outcome)[:160])
                else:
                    sessions.append(s)
        start_wall = time.perf_counter() - started
        idle_mb = (used_mb() - before) / max(1, len(sessions))
        cpu_before, clock = busy_cores(), time.perf_counter()
        await asyncio.sleep(10)  # what the idle sessions cost the machine's CPU: the measurement, not a wait
        idle_cores = (busy_cores() - cpu_before) / (time.perf_counter() - clock)
        answers = await asyncio.gather(*(s.execute(CELL) for s in sessions), return_exceptions=True)
        correct = sum(1 for a in answers if not isinstance(a, BaseException) and a.ok and a.stdout == "45\n")
    finally:
        await asyncio.gather(*(s.shutdown() for s in sessions), return_exceptions=True)
    return {"asked": count, "started": len(sessions), "correct": correct, "failed_starts": sorted(set(failed)),
            "stopped_early": stopped_early, "starts_per_s": len(sessions) / start_wall, "idle_mb": idle_mb,
            "idle_cores": idle_cores, "platform": platform or "default"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--platform", choices=("systrap", "ptrace"), default=None)
    parser.add_argument("--batch", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(density(Path(tmp), args.sessions, args.platform, args.batch))
    print(f"{out['platform']}: {out['correct']}/{out['asked']} idle sessions answered ({out['started']} started, "
          f"{out['starts_per_s']:.2f}/s in batches of {args.batch}); host memory per idle session "
          f"{out['idle_mb']:.1f} MB; the idle sessions used {out['idle_cores']:.2f} cores")
    for line in ([out["stopped_early"]] if out["stopped_early"] else []) + out["failed_starts"]:
        print("  ", line)


if __name__ == "__main__":
    main()
