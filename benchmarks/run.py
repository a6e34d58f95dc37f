"""Side-by-side benchmarks: a plain local ipykernel (no sandbox, no gate) vs cellgate.

    .venv/bin/python benchmarks/run.py [--quick] [--kernels N]

Prints a table (median, p95, ratio against the plain kernel where there is
one) and writes it with machine info to benchmarks/results/. Ratios, not
absolute times, are the targets: these machines are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import bookkeeping
import data_path
import data_stack
import density
import live
import load
import network
from jupyter_client import AsyncKernelManager

from cellgate.gate import Pool, Session
from cellgate.gate import _hostkey as hostkey
from cellgate.gate.audit.journal import GENESIS, Journal
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.sandbox.local.runsc import find as find_runsc
from cellgate.gate.sandbox.local.snapshot import discard

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


class PlainKernel:
    """A local ipykernel with no sandbox and no gate: the baseline."""

    async def start(self) -> float:
        t = time.perf_counter()
        self.km = AsyncKernelManager(kernel_name="python3")
        await self.km.start_kernel()
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=60)
        return (time.perf_counter() - t) * 1000

    async def trip(self) -> float:
        t = time.perf_counter()
        await self.kc.execute_interactive("1", timeout=30, output_hook=lambda m: None)
        return (time.perf_counter() - t) * 1000

    async def stop(self) -> None:
        self.kc.stop_channels()
        await self.km.shutdown_kernel(now=True)


async def timed_start(session: Session) -> float:
    t = time.perf_counter()
    await session.start()
    return (time.perf_counter() - t) * 1000


async def timed_cell(session: Session) -> float:
    t = time.perf_counter()
    await session.execute("1")
    return (time.perf_counter() - t) * 1000


async def starts_side_by_side(folder: Path, rounds: int) -> dict[str, list[float]]:
    """Cold starts, alternating plain / snapshot / snapshots off / first of a configuration, so drift hits all."""
    out: dict[str, list[float]] = {"plain": [], "snapshot": [], "cold": [], "first": []}
    warm = Session(notebook=folder / "warm.ipynb", cwd=folder)  # makes sure the image exists
    await warm.start()
    await warm.shutdown()
    for attempt in range(rounds):
        plain = PlainKernel()
        out["plain"].append(await plain.start())
        await plain.stop()
        for kind, options in (("snapshot", {}), ("cold", {"snapshot": False}),
                              ("first", {"memory_mb": 1100 + attempt})):  # a configuration with no image yet
            session = Session(notebook=folder / f"start-{kind}-{attempt}.ipynb", cwd=folder, **options)
            out[kind].append(await timed_start(session))
            image = session.provisioner.handle.sandbox.image  # a LocalHandle: the local backend
            await session.shutdown()
            if kind == "first" and image is not None:
                discard(image.parent, image.name)
    return out


async def trips_side_by_side(folder: Path, cells: int) -> dict[str, list[float]]:
    """Trivial cells, alternating between a plain kernel, cellgate, and cellgate without gVisor, all up at once.

    The last one (isolation none: development only) separates what the gate and
    the recording cost from what running inside gVisor costs.
    """
    plain = PlainKernel()
    await plain.start()
    trips: dict[str, list[float]] = {"plain": [], "cellgate": [], "unsandboxed": []}
    async with Session(notebook=folder / "trips.ipynb", cwd=folder) as session, \
            Session(notebook=folder / "trips-none.ipynb", cwd=folder, isolation="none") as unsandboxed:
        for _ in range(10):  # warm all up
            await plain.trip()
            await timed_cell(session)
            await timed_cell(unsandboxed)
        for _ in range(cells):
            trips["plain"].append(await plain.trip())
            trips["cellgate"].append(await timed_cell(session))
            trips["unsandboxed"].append(await timed_cell(unsandboxed))
    await plain.stop()
    return trips


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


SEQUENTIAL_CALLS = (
    "import time\ntimes = []\n"
    "for i in range({calls}):\n    t = time.perf_counter(); tools.echo('x'); times.append(time.perf_counter() - t)\n"
    "print(' '.join(f'{{x * 1000:.4f}}' for x in times))")


async def calls_and_memory(folder: Path, calls: int) -> dict[str, list[float]]:
    tools = folder / "echo_tools.py"
    tools.write_text(ECHO_TOOLS)
    out: dict[str, list[float]] = {"call": [], "gather": [], "rss": []}
    async with Session(tools=[tools], notebook=folder / "calls-none.ipynb", cwd=folder, isolation="none") as session:
        result = await session.execute(SEQUENTIAL_CALLS.format(calls=calls))
        out["call_unsandboxed"] = [float(x) for x in result.stdout.split()]
    async with Session(tools=[tools], notebook=folder / "calls.ipynb", cwd=folder) as session:
        out["rss"].append(sandbox_rss_mb(session.provisioner.handle.id))
        result = await session.execute(SEQUENTIAL_CALLS.format(calls=calls))
        out["call"] = [float(x) for x in result.stdout.split()]
        for _ in range(3):
            result = await session.execute(
                "import asyncio, time\nsem = asyncio.Semaphore(32)\n"
                "async def one(i):\n    async with sem:\n        return await tools.aio.echo(str(i))\n"
                f"t = time.perf_counter()\nawait asyncio.gather(*(one(i) for i in range({calls})))\n"
                f"print({calls} / (time.perf_counter() - t))")
            out["gather"].append(float(result.stdout))
    return out


async def tracing_off_and_on(folder: Path, calls: int, rounds: int) -> dict[str, list[float]]:
    """The same blocking gated call in two sandboxed sessions, untraced and traced (OpenTelemetry's SDK, spans
    batched to an in-memory exporter and metrics to an in-memory reader: cellgate's own cost, not a network's)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    tools = folder / "echo_tools.py"
    tools.write_text(ECHO_TOOLS)
    out: dict[str, list[float]] = {"off": [], "on": []}
    for mode in ("off", "on") * rounds:  # interleaved: the machine's drift falls on both
        config = folder / f"tracing-{mode}.toml"
        config.write_text(f"[otel]\nenabled = {'true' if mode == 'on' else 'false'}\n")
        async with Session(config=config, tools=[tools], notebook=folder / f"tracing-{mode}.ipynb",
                           cwd=folder) as session:
            result = await session.execute(SEQUENTIAL_CALLS.format(calls=calls))
            out[mode] += [float(x) for x in result.stdout.split()]
    provider.shutdown()
    return out


class UnsyncedJournal(Journal):
    """The journal file without its fsyncs: shows what the write-ahead intent fsync costs."""

    def append(self, event: str, sync: bool = False, **data: object) -> dict[str, Any]:
        record = super().append(event, sync=False, **data)
        self.synced = self.seq
        return record

    def sync(self) -> int:
        self.synced = self.seq
        return self.synced


class MemoryJournal(UnsyncedJournal):
    """The journal's records and hashes, kept in memory: no file, no fsync."""

    def __init__(self, path: Path) -> None:
        self.path, self.broken, self.seq, self.head, self.synced = path, None, 0, GENESIS, 0
        self.key = hostkey.load()  # records are still MAC'd: that is part of what recording costs
        self._lock = threading.Lock()
        self._file = io.StringIO()


class UnrecordedRecorder(Recorder):
    """The same bookkeeping without the journal file or the notebook: the baseline for recording's cost."""

    def write_notebook(self) -> None:
        pass

    def close(self, ending: str = "session-ended", **data: Any) -> None:  # as Recorder.close
        pass


# How the session records: ``full`` as shipped; ``unsynced``: journal and notebook without fsync;
# ``none``: neither written (the journal's records are still built and MAC'd, in memory).
RECORDING: dict[str, dict[str, Any]] = {
    "full": {},
    "unsynced": {"journal_factory": UnsyncedJournal},
    "none": {"journal_factory": MemoryJournal, "recorder_factory": UnrecordedRecorder},
}


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


@contextlib.contextmanager
def fsyncs_timed() -> Iterator[list[float]]:
    """Every ``os.fsync`` in this process while inside, timed: yields [count, milliseconds], filled in as they run."""
    spent = [0.0, 0.0]
    real = os.fsync

    def timed(fd: int) -> None:
        t = time.perf_counter()
        try:
            real(fd)
        finally:
            spent[0] += 1
            spent[1] += (time.perf_counter() - t) * 1000

    os.fsync = timed
    try:
        yield spent
    finally:
        os.fsync = real


async def northwind(folder: Path, rounds: int) -> dict[str, list[float]]:
    """The Northwind example recorded as shipped, without fsyncs, and not recorded, alternating; for the
    recorded run, also the fsyncs made during its cell (how many, and the time spent in them)."""
    times: dict[str, list[float]] = {"full": [], "unsynced": [], "none": [], "fsyncs": [], "fsync_ms": []}
    for attempt in range(rounds):
        for mode in ("full", "unsynced", "none"):
            async with Session(tools=[NORTHWIND / "tools.py"], notebook=folder / f"nw-{mode}-{attempt}.ipynb",
                               cwd=folder, **RECORDING[mode]) as s:
                with fsyncs_timed() as fsyncs:
                    t = time.perf_counter()
                    result = await s.execute((NORTHWIND / "late_orders.py").read_text())
                    times[mode].append((time.perf_counter() - t) * 1000)
                assert result.stdout == "10000 312\n", result.text
                if mode == "full":
                    times["fsyncs"].append(fsyncs[0])
                    times["fsync_ms"].append(fsyncs[1])
    # What recording costs once its fsyncs are taken out of the same runs.
    times["full_less_fsyncs"] = [full - spent for full, spent in zip(times["full"], times["fsync_ms"])]
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


def light_imports(rounds: int) -> dict[str, list[float]]:
    """Each in a fresh interpreter: importing the policy module (target: under 0.2 s), and `cellgate --help`
    against a bare `python -c pass` (the light commands must not import jupyter_client, jsonschema or the Session)."""
    timed_import = ("import time; t = time.perf_counter(); import cellgate.gate.calls.policy; "
                    "print((time.perf_counter() - t) * 1000)")
    cli = [sys.executable, "-m", "cellgate.gate", "--help"]
    times: dict[str, list[float]] = {"policy": [], "python": [], "help": []}
    for _ in range(rounds):
        done = subprocess.run([sys.executable, "-c", timed_import], capture_output=True, text=True, check=True)
        times["policy"].append(float(done.stdout))
        for name, argv in (("python", [sys.executable, "-c", "pass"]), ("help", cli)):
            t = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            times[name].append((time.perf_counter() - t) * 1000)
    return times


async def cli_starts(folder: Path, rounds: int) -> dict[str, list[float]]:
    """`cellgate --help` and `cellgate show` on a recorded Northwind run, each a fresh process as a user starts it,
    side by side with `python -c pass` (targets: --help within 10x of it, show within 0.5 s)."""
    notebook = folder / "cli-northwind.ipynb"
    async with Session(tools=[NORTHWIND / "tools.py"], notebook=notebook, cwd=folder) as s:
        assert (await s.execute((NORTHWIND / "late_orders.py").read_text())).stdout == "10000 312\n"
    script = Path(sys.executable).with_name("cellgate")  # the installed command, as a user runs it
    command = [str(script)] if script.exists() else [sys.executable, "-m", "cellgate.gate"]
    argvs = {"python": [sys.executable, "-c", "pass"], "help": [*command, "--help"],
             "show": [*command, "show", str(notebook)]}
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(rounds):
        for name, argv in argvs.items():  # interleaved, so a busy moment of the machine hits all three
            t = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, cwd=folder)
            times[name].append((time.perf_counter() - t) * 1000)
    return times
async def _shell_reply(kc: Any, msg_id: str) -> float:
    t = time.perf_counter()
    while True:
        reply = await kc.get_shell_msg(timeout=600)
        if reply["parent_header"].get("msg_id") == msg_id:
            return (time.perf_counter() - t) * 1000


async def frontend_requests(rounds: int, samples: int) -> dict[str, dict[str, list[float]]]:
    """What a person in JupyterLab waits for, on the plain `python3` kernelspec and on `cellgate` (installed
    kernelspec, sandbox restored from its snapshot image), alternating: the first Tab completion after a
    start, then completion, inspection and history requests."""
    out: dict[str, dict[str, list[float]]] = {name: {"first": [], "complete": [], "inspect": [], "history": []}
                                              for name in ("python3", "cellgate")}
    for _ in range(rounds):
        for name, times in out.items():
            km = AsyncKernelManager(kernel_name=name)
            await km.start_kernel()
            kc = km.client()
            kc.start_channels()
            try:
                await kc.wait_for_ready(timeout=120)
                times["first"].append(await _shell_reply(kc, kc.complete("zi")))
                for code in ("a = 1", "b = a + 1", "print(b)"):
                    await kc.execute_interactive(code, timeout=60, output_hook=lambda m: None)
                for _ in range(samples):
                    times["complete"].append(await _shell_reply(kc, kc.complete("pri")))
                    times["inspect"].append(await _shell_reply(kc, kc.inspect("zip")))
                    times["history"].append(await _shell_reply(kc, kc.history(hist_access_type="tail", n=10)))
            finally:
                kc.stop_channels()
                await km.shutdown_kernel(now=True)
    return out


def machine() -> dict:
    runsc = find_runsc()
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "python": platform.python_version(),
            "cpus": os.cpu_count(), "kernel": platform.release(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "runsc": runsc.version, "platform": runsc.platform}


SECTIONS = ("starts", "trips", "calls", "bookkeeping", "tracing", "pool", "northwind", "long", "concurrent", "imports",
            "cli", "frontend", "data", "datapath", "network", "load", "density", "live")


async def measure(folder: Path, args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    """The rows of the sections asked for, and a closing note."""
    cells, calls = (20, 200) if args.quick else (100, 1000)
    rows: list[dict[str, Any]] = []
    note = ""
    if "starts" in args.only:
        starts = await starts_side_by_side(folder, 3 if args.quick else 5)
        rows += [
            row("cold start, plain ipykernel", starts["plain"]),
            row("cold start, cellgate (gVisor, snapshot image)", starts["snapshot"], baseline=starts["plain"]),
            row("cold start, cellgate (gVisor, snapshots off)", starts["cold"], baseline=starts["plain"]),
            row("first start of a configuration (builds its image)", starts["first"], baseline=starts["plain"]),
        ]
    if "pool" in args.only:
        (folder / "pool").mkdir()
        rows.append(row("pool acquire (warm sandbox)", await pool_acquire(folder, 5 if args.quick else 10)))
    if "trips" in args.only:
        trips = await trips_side_by_side(folder, cells)
        rows += [
            row("trivial cell round trip, plain", trips["plain"]),
            row("trivial cell round trip, cellgate", trips["cellgate"], baseline=trips["plain"]),
            row("trivial cell, cellgate without gVisor (dev only)", trips["unsandboxed"], baseline=trips["plain"]),
        ]
    if "calls" in args.only:
        cg = await calls_and_memory(folder, calls)
        rows += [
            row("blocking gated call (sequential)", cg["call"]),
            row("blocking gated call, without gVisor (dev only)", cg["call_unsandboxed"]),
            row("gated calls with 32-way gather", cg["gather"], unit="calls/s"),
            row("idle sandboxed kernel, host RSS", cg["rss"], unit="MB"),
        ]
    if "bookkeeping" in args.only:
        rows += bookkeeping.rows(await bookkeeping.bookkeeping(folder, MemoryJournal, args.quick), row)
    if "tracing" in args.only:
        traced = await tracing_off_and_on(folder, calls, 1 if args.quick else 3)
        rows += [
            row("blocking gated call, tracing off", traced["off"]),
            row("blocking gated call, tracing on (OpenTelemetry)", traced["on"], baseline=traced["off"]),
        ]
    if "northwind" in args.only:
        nw = await northwind(folder, args.rounds or (3 if args.quick else 7))
        rows += [
            row("Northwind example (313 calls), not recorded", nw["none"]),
            row("Northwind example (313 calls), recorded", nw["full"], baseline=nw["none"]),
            row("Northwind, recorded without fsyncs (the bound)", nw["unsynced"], baseline=nw["none"]),
            row("  fsyncs in the recorded cell", nw["fsyncs"], unit="fsyncs"),
            row("  time spent in them", nw["fsync_ms"]),
            row("  recorded, less that time", nw["full_less_fsyncs"], baseline=nw["none"]),
        ]
    if "long" in args.only:
        length = args.long if not args.quick else 100
        first, last = await long_session(folder, length)
        rows += [row("trivial cell, cells 1-20 of a long session", first),
                 row(f"trivial cell, last 20 of {length} cells", last, baseline=first)]
    if "concurrent" in args.only:
        answering, conc = await concurrent(folder, args.kernels if not args.quick else 4)
        rows.append(row(f"cell round trip with {len(conc)} sandboxed kernels up", conc))
        note = f"\n{answering} of {len(conc)} concurrent sandboxed kernels answered a cell within 1 s."
    if "imports" in args.only:
        light = light_imports(5 if args.quick else 15)
        rows += [row("import cellgate.gate.calls.policy (target < 200)", light["policy"]),
                 row("python -c pass (process)", light["python"]),
                 row("cellgate --help (process)", light["help"], baseline=light["python"])]
    if "cli" in args.only:
        cli = await cli_starts(folder, 5 if args.quick else 15)
        rows += [row("CLI: python -c pass (the baseline)", cli["python"]),
                 row("CLI: cellgate --help (target: ratio < 10)", cli["help"], baseline=cli["python"]),
                 row("CLI: cellgate show, Northwind (target < 500)", cli["show"], baseline=cli["python"])]
    if "frontend" in args.only:
        fr = await frontend_requests(2 if args.quick else 5, 10 if args.quick else 30)
        plain, cg = fr["python3"], fr["cellgate"]
        rows += [row("first completion after start, plain", plain["first"]),
                 row("first completion after start, cellgate", cg["first"], baseline=plain["first"]),
                 row("completion, plain", plain["complete"]),
                 row("completion, cellgate", cg["complete"], baseline=plain["complete"]),
                 row("inspect, plain", plain["inspect"]),
                 row("inspect, cellgate", cg["inspect"], baseline=plain["inspect"]),
                 row("history (tail 10), plain", plain["history"]),
                 row("history (tail 10), cellgate", cg["history"], baseline=plain["history"])]
    if "data" in args.only:
        rows += data_stack.rows(await data_stack.data_stack(folder, 2 if args.quick else 5), row)
    if "datapath" in args.only:
        rows += data_path.rows(await data_path.data_path(folder, 10 if args.quick else 30), row)
    if "network" in args.only:
        rows += network.rows(await network.network(folder, *((100, 4) if args.quick else (500, 10))), row)
    for gvisor in ("systrap", "ptrace") if "load" in args.only else ():
        (folder / f"load-{gvisor}").mkdir()
        held = await load.load(folder / f"load-{gvisor}", args.load_sessions, gvisor)
        ideal = held["one_call_s"] * held["sessions"] / held["cores"]
        tag = " (ptrace)" if gvisor == "ptrace" else ""  # systrap's rows keep the names earlier runs gave them
        rows += [
            row(f"{held['sessions']} sessions x a 1 MB call at once: cells correct{tag}", [held["correct"]],
                unit="cells"),
            row(f"  their wall time vs one call x {held['sessions']} / cores{tag}", [held["wall_s"] * 1000],
                baseline=[ideal * 1000]),
            row(f"  {held['sessions']} concurrent starts (goal >= 2){tag}", [held["starts_per_s"]], unit="starts/s"),
            row(f"  host memory per idle session, free delta (goal <= 64){tag}", [held["idle_mb_per_session"]],
                unit="MB"),
        ]
    if "density" in args.only:
        (folder / "density").mkdir()
        (folder / "density-default").mkdir()
        dense = await density.density(folder / "density", args.idle_sessions, "ptrace")
        default = await density.density(folder / "density-default", 30, None)
        rows += [
            row(f"{dense['asked']} idle sessions (ptrace): answered a cell", [dense["correct"]], unit="cells"),
            row("  host memory per idle session, free delta (goal <= 64)", [dense["idle_mb"]], unit="MB"),
            row(f"  CPU the {dense['started']} idle sessions use", [dense["idle_cores"]], unit="cores"),
            row("  started in batches of 20", [dense["starts_per_s"]], unit="starts/s"),
            row("30 idle sessions (systrap, the default): CPU used", [default["idle_cores"]], unit="cores"),
            row("  host memory per idle session, free delta", [default["idle_mb"]], unit="MB"),
        ]
        if dense["stopped_early"] or dense["failed_starts"]:
            note += "\n" + "; ".join([dense["stopped_early"], *dense["failed_starts"]])
    if "live" in args.only:
        (folder / "live").mkdir()
        quick = args.quick
        rows += live.rows(await live.live(folder / "live", 2 if quick else 5, 10, 1 if quick else 3), row)
    return rows, note


def previous_run(results: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """The rows of the latest whole run on record, by metric, and when it ran."""
    runs = sorted(results.glob("run-*.json"))
    if not runs:
        return {}, ""
    data = json.loads(runs[-1].read_text())
    return {row["metric"]: row for row in data["rows"]}, data["machine"]["date"]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--kernels", type=int, default=32, help="concurrent sandboxed kernels to try")
    parser.add_argument("--long", type=int, default=1000, help="cells in the long session")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="run these sections only (default: all)")
    parser.add_argument("--rounds", type=int, default=0, help="northwind: rounds of the three recording modes")
    parser.add_argument("--load-sessions", type=int, default=100, help="load: sessions each making a 1 MB call")
    parser.add_argument("--idle-sessions", type=int, default=300, help="density: idle sessions on this machine")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows, note = await measure(Path(tmp), args)
    results = ROOT / "benchmarks" / "results"
    before, when = previous_run(results)
    lines = [f"| {'metric':<48} | {'median':>10} | {'p95':>10} | unit     | ratio | previous median (ratio) |",
             f"|{'-' * 50}|{'-' * 12}|{'-' * 12}|----------|-------|-------------------------|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else ""
        old = before.get(r["metric"])
        was = (f"{old['median']:.2f}" + (f" ({old['ratio']:.2f})" if "ratio" in old else "")) if old else "(new)"
        lines.append(f"| {r['metric']:<48} | {r['median']:>10.2f} | {r['p95']:>10.2f} | {r['unit']:<8} | {ratio:>5} "
                     f"| {was:>23} |")
    if when:
        lines.append(f"\nThe previous figures are the run of {when} (benchmarks/results/run-*.json).")
    table = "\n".join(lines) + note
    print(table)
    if set(args.only) != set(SECTIONS):
        print("\n(a partial run: benchmarks/results/ is left as it was)")
        return
    info = machine()
    stamp = info["date"].replace(":", "").replace("-", "")
    results.mkdir(exist_ok=True)
    (results / "latest.md").write_text(f"# cellgate benchmarks\n\nmachine: `{json.dumps(info)}`\n\n{table}\n")
    (results / f"run-{stamp}.json").write_text(json.dumps({"machine": info, "rows": rows, "note": note.strip()}, indent=1))
    print(f"\nwritten to {results / 'latest.md'}")


if __name__ == "__main__":
    asyncio.run(main())
