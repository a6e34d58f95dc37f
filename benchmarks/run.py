"""Side-by-side benchmarks: a plain local ipykernel (no sandbox, no gate) vs cellgate.

    .venv/bin/python benchmarks/run.py [--quick] [--kernels N]

Prints a table (median, p95, ratio against the plain kernel where there is
one) and writes it with machine info to benchmarks/results/. Ratios, not
absolute times, are the targets: these machines are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import contextlib
import io
import threading
from collections.abc import Iterator

from jupyter_client import AsyncKernelManager

from cellgate.gate import Pool, Session, provisioner, recorder
from cellgate.gate.journal import GENESIS, Journal
from cellgate.gate.runsc import find as find_runsc
from cellgate.gate.snapshot import discard

ROOT = Path(__file__).resolve().parent.parent
NORTHWIND = ROOT / "examples" / "northwind"
ECHO_TOOLS = '''
def echo(text: str) -> str:
    """Return text."""
    return text
'''


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def row(name: str, values: list[float], unit: str = "ms", baseline: list[float] | None = None) -> dict:
    entry = {"metric": name, "unit": unit, "n": len(values), "median": statistics.median(values), "p95": p(values, 0.95)}
    if baseline:
        entry["ratio"] = entry["median"] / statistics.median(baseline)
    return entry


async def plain_kernel(cells: int) -> tuple[list[float], list[float]]:
    starts, trips = [], []
    for _ in range(3):
        t = time.perf_counter()
        km = AsyncKernelManager(kernel_name="python3")
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        starts.append((time.perf_counter() - t) * 1000)
        if not trips:
            for _ in range(cells):
                t = time.perf_counter()
                await kc.execute_interactive("1", timeout=30, output_hook=lambda m: None)
                trips.append((time.perf_counter() - t) * 1000)
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    return starts, trips


def sandbox_rss_mb(sandbox_id: str) -> float:
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if sandbox_id.encode() not in cmdline:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


async def cellgate_kernel(folder: Path, cells: int, calls: int) -> dict[str, list[float]]:
    tools = folder / "echo_tools.py"
    tools.write_text(ECHO_TOOLS)
    out: dict[str, list[float]] = {"start": [], "trip": [], "call": [], "gather": [], "rss": []}
    for attempt in range(4):
        t = time.perf_counter()
        session = Session(tools=[tools], notebook=folder / f"bench-{attempt}.ipynb", cwd=folder)
        await session.start()
        if attempt:  # the first start of the run may build the configuration's snapshot image
            out["start"].append((time.perf_counter() - t) * 1000)
        if attempt == 1:
            for _ in range(cells):
                t = time.perf_counter()
                await session.execute("1")
                out["trip"].append((time.perf_counter() - t) * 1000)
            result = await session.execute(
                "import time\ntimes = []\n"
                f"for i in range({calls}):\n    t = time.perf_counter(); tools.echo('x'); times.append(time.perf_counter() - t)\n"
                "print(' '.join(f'{x * 1000:.4f}' for x in times))")
            out["call"] = [float(x) for x in result.stdout.split()]
            for _ in range(3):
                result = await session.execute(
                    "import asyncio, time\nsem = asyncio.Semaphore(32)\n"
                    "async def one(i):\n    async with sem:\n        return await tools.aio.echo(str(i))\n"
                    f"t = time.perf_counter()\nawait asyncio.gather(*(one(i) for i in range({calls})))\n"
                    f"print({calls} / (time.perf_counter() - t))")
                out["gather"].append(float(result.stdout))
            out["rss"].append(sandbox_rss_mb(session.provisioner.sandbox.id))
        await session.shutdown()
    return out


async def first_and_cold_starts(folder: Path) -> tuple[list[float], list[float]]:
    """Starts that build a snapshot image (a configuration's first), and starts with snapshots off."""
    first, cold = [], []
    for attempt in range(3):
        t = time.perf_counter()
        # A memory limit no other run uses: a configuration without an image yet.
        session = Session(notebook=folder / f"first-{attempt}.ipynb", cwd=folder, memory_mb=1100 + attempt)
        await session.start()
        first.append((time.perf_counter() - t) * 1000)
        image = session.provisioner.sandbox.image
        await session.shutdown()
        if image is not None:
            discard(image.parent, image.name)
        t = time.perf_counter()
        async with Session(notebook=folder / f"cold-{attempt}.ipynb", cwd=folder, snapshot=False):
            cold.append((time.perf_counter() - t) * 1000)
    return first, cold


class MemoryJournal(Journal):
    """The journal's records and hashes, kept in memory: no file, no fsync."""

    def __init__(self, path: Path) -> None:
        self.path, self.broken, self.seq, self.head, self.synced = path, None, 0, GENESIS, 0
        self._lock = threading.Lock()
        self._file = io.StringIO()

    def append(self, event: str, sync: bool = False, **data: object) -> dict:
        record = super().append(event, sync=False, **data)
        self.synced = self.seq
        return record

    def sync(self) -> int:
        self.synced = self.seq
        return self.synced


class UnrecordedRecorder(recorder.Recorder):
    """The same bookkeeping without the journal file or the notebook: the baseline for recording's cost."""

    def write_notebook(self) -> None:
        pass

    def close(self) -> None:
        pass


class UnsyncedJournal(Journal):
    """The journal file without its fsyncs: shows what the write-ahead intent fsync costs."""

    def append(self, event: str, sync: bool = False, **data: object) -> dict:
        record = super().append(event, sync=False, **data)
        self.synced = self.seq
        return record

    def sync(self) -> int:
        self.synced = self.seq
        return self.synced


@contextlib.contextmanager
def recording(mode: str) -> Iterator[None]:
    """``full`` as shipped; ``unsynced``: journal and notebook without fsync; ``none``: neither written."""
    saved = recorder.Journal, provisioner.Recorder
    if mode == "unsynced":
        recorder.Journal = UnsyncedJournal  # type: ignore[misc]
    elif mode == "none":
        recorder.Journal, provisioner.Recorder = MemoryJournal, UnrecordedRecorder  # type: ignore[misc]
    try:
        yield
    finally:
        recorder.Journal, provisioner.Recorder = saved  # type: ignore[misc]


async def pool_acquire(folder: Path, count: int) -> list[float]:
    """Time to get a session from a warm pool (its sandbox already started)."""
    times = []
    async with Pool(2, max_sessions=4, notebook_dir=folder / "pool", cwd=folder) as pool:
        for _ in range(count):
            await pool.wait_warm()
            t = time.perf_counter()
            session = await pool.acquire()
            times.append((time.perf_counter() - t) * 1000)
            await pool.release(session)
    return times


async def northwind(folder: Path, mode: str = "full") -> list[float]:
    times = []
    for attempt in range(5):
        with recording(mode):
            async with Session(tools=[NORTHWIND / "tools.py"], notebook=folder / f"nw-{mode}-{attempt}.ipynb",
                               cwd=folder) as s:
                t = time.perf_counter()
                result = await s.execute((NORTHWIND / "late_orders.py").read_text())
                times.append((time.perf_counter() - t) * 1000)
                assert result.stdout == "10000 312\n", result.text
    return times


async def long_session(folder: Path, cells: int) -> tuple[list[float], list[float]]:
    async with Session(notebook=folder / "long.ipynb", cwd=folder) as s:
        samples = []
        for _ in range(cells):
            t = time.perf_counter()
            await s.execute("1")
            samples.append((time.perf_counter() - t) * 1000)
    return samples[:20], samples[-20:]


async def concurrent(folder: Path, count: int) -> tuple[int, list[float]]:
    sessions = []
    try:
        for index in range(count):
            session = Session(notebook=folder / f"c{index}.ipynb", cwd=folder)
            await session.start()
            sessions.append(session)
        times = []
        for session in sessions:
            t = time.perf_counter()
            result = await session.execute("print(6 * 7)")
            times.append((time.perf_counter() - t) * 1000)
            assert result.stdout == "42\n"
        answering = sum(t < 1000 for t in times)
        return answering, times
    finally:
        await asyncio.gather(*(s.shutdown() for s in sessions), return_exceptions=True)


def machine() -> dict:
    runsc = find_runsc()
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "python": platform.python_version(),
            "cpus": os.cpu_count(), "kernel": platform.release(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "runsc": runsc.version, "platform": runsc.platform}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--kernels", type=int, default=32, help="concurrent sandboxed kernels to try")
    parser.add_argument("--long", type=int, default=1000, help="cells in the long session")
    args = parser.parse_args()
    cells, calls = (20, 200) if args.quick else (100, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain_start, plain_trip = await plain_kernel(cells)
        cg = await cellgate_kernel(folder, cells, calls)
        first_start, cold = await first_and_cold_starts(folder)
        (folder / "pool").mkdir()
        acquire = await pool_acquire(folder, 5 if args.quick else 10)
        nw = await northwind(folder)
        nw_bare = await northwind(folder, "none")
        nw_unsynced = await northwind(folder, "unsynced")
        first, last = await long_session(folder, args.long if not args.quick else 100)
        answering, conc = await concurrent(folder, args.kernels if not args.quick else 4)
    rows = [
        row("cold start, plain ipykernel", plain_start),
        row("cold start, cellgate (gVisor, snapshot image)", cg["start"], baseline=plain_start),
        row("cold start, cellgate (gVisor, snapshots off)", cold, baseline=plain_start),
        row("first start of a configuration (builds its image)", first_start, baseline=plain_start),
        row("pool acquire (warm sandbox)", acquire),
        row("trivial cell round trip, plain", plain_trip),
        row("trivial cell round trip, cellgate", cg["trip"], baseline=plain_trip),
        row("blocking gated call (sequential)", cg["call"]),
        row("gated calls with 32-way gather", cg["gather"], unit="calls/s"),
        row("Northwind example (313 calls), not recorded", nw_bare),
        row("Northwind example (313 calls), recorded", nw, baseline=nw_bare),
        row("Northwind, recorded without fsyncs (the bound)", nw_unsynced, baseline=nw_bare),
        row("idle sandboxed kernel, host RSS", cg["rss"], unit="MB"),
        row("trivial cell, cells 1-20 of a long session", first),
        row(f"trivial cell, last 20 of {args.long if not args.quick else 100} cells", last, baseline=first),
        row(f"cell round trip with {len(conc)} sandboxed kernels up", conc),
    ]
    lines = [f"| {'metric':<48} | {'median':>10} | {'p95':>10} | unit     | ratio |", f"|{'-' * 50}|{'-' * 12}|{'-' * 12}|----------|-------|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
        lines.append(f"| {r['metric']:<48} | {r['median']:>10.2f} | {r['p95']:>10.2f} | {r['unit']:<8} | {ratio:>5} |")
    lines.append(f"\n{answering} of {len(conc)} concurrent sandboxed kernels answered a cell within 1 s.")
    table = "\n".join(lines)
    print(table)
    info = machine()
    stamp = info["date"].replace(":", "").replace("-", "")
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    (results / "latest.md").write_text(f"# cellgate benchmarks\n\nmachine: `{json.dumps(info)}`\n\n{table}\n")
    (results / f"run-{stamp}.json").write_text(json.dumps({"machine": info, "rows": rows, "answering": answering}, indent=1))
    print(f"\nwritten to {results / 'latest.md'}")


if __name__ == "__main__":
    asyncio.run(main())
