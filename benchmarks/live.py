"""Live sessions (issue 34): pause and resume per 100 MB of kernel memory, fork against cold starts.

    .venv/bin/python benchmarks/live.py [--rounds 2] [--forks 10] [--fork-rounds 1]

Prints a JSON dict of lists of samples (seconds, MB); ``run.py``'s ``live`` section turns them into rows.

- pause (``Session.checkpoint``) and resume (``Session.resume`` + ``start``) of a session holding nothing, 100 MB and
  300 MB of random bytes (incompressible, every page touched): the slope from 100 to 300 MB is the time per 100 MB
  (peers: E2B pauses at about 4 s/GiB and resumes in about 1 s). Phases are
  timed from outside the gate by wrapping what it calls (nothing of the gate is changed): the kernel letting go of
  its sockets, ``runsc checkpoint`` alone, the sha256 of the image's files (written into the manifest at a pause,
  checked again before a resume reads a byte), and the backend's restore (``runsc restore`` until the kernel's
  sockets answer).
- ``await parent.fork(N)`` against N sessions started at once (each restored from the configuration's snapshot
  image, as every start is); and the host memory (``free``'s used: MemTotal - MemAvailable, as ``load.py``) the N
  idle forks took against the N idle independent sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from load import used_mb

from cellgate.gate import Session
from cellgate.gate.sandbox.local.container import Sandbox
from cellgate.gate.sandbox.local.local_backend import LocalBackend
from cellgate.gate.session import live as gate_live
from cellgate.gate.session.relay.relay import Relay

HOLD = "import os\nheld = bytearray(os.urandom({mb} << 20))\nprint(len(held) >> 20)"
CHECK = "print(len(held) >> 20)"
SETTLE_S = 3.0  # after sessions come up, before host memory is read: their start's transient memory given back


class Phases:
    """Times what the gate calls during one pause or resume, by wrapping it (the gate's code is not changed)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._patches: list[tuple[Any, str, Any]] = []

    def _add(self, name: str, seconds: float) -> None:
        self.times[name] = self.times.get(name, 0.0) + seconds

    def reset(self) -> dict[str, float]:
        out, self.times = self.times, {}
        return out

    def wrap(self, owner: Any, attribute: str, name: str | Callable[..., str | None]) -> None:
        """Time each call of ``owner.attribute`` (a function or coroutine function) under ``name`` (or the name
        ``name(*args)`` gives, None: not timed) until ``wrapped`` ends."""
        original = getattr(owner, attribute, None)
        if original is None:  # the gate moved it: that phase is not timed (its rows are left out)
            return

        def label(*args: Any, **kwargs: Any) -> str | None:
            return name(*args, **kwargs) if callable(name) else name

        if inspect.iscoroutinefunction(original):
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                named, started = label(*args, **kwargs), time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    if named:
                        self._add(named, time.perf_counter() - started)
        else:
            def wrapper(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                named, started = label(*args, **kwargs), time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    if named:
                        self._add(named, time.perf_counter() - started)

        self._patches.append((owner, attribute, original))
        setattr(owner, attribute, wrapper)

    @contextlib.contextmanager
    def wrapped(self) -> Iterator[Phases]:
        def runsc_checkpoint(argv: Any, *args: Any, **kwargs: Any) -> str | None:
            return "runsc_checkpoint" if isinstance(argv, list) and "checkpoint" in argv else None

        def restore(backend: Any, request: Any) -> str | None:
            return "backend_restore" if request.restore is not None else "backend_start"

        self.wrap(subprocess, "run", runsc_checkpoint)
        self.wrap(LocalBackend, "checkpoint", "backend_checkpoint")  # the kernel's marker wait + runsc checkpoint
        self.wrap(LocalBackend, "start", restore)
        self.wrap(gate_live, "_image_files", "image_sha256")
        self.wrap(Relay, "pause_kernel", "kernel_let_go_asked")  # the host's request on the control channel
        self.wrap(Sandbox, "configuration_key", "configuration_key")
        self.wrap(Session, "shutdown", "shutdown")  # a pause stops the paused sandbox through the session's shutdown
        self.wrap(gate_live, "fork", "fork_checkpoint")  # Session.fork: the parent's checkpoint, before the restores
        try:
            yield self
        finally:
            for owner, attribute, original in reversed(self._patches):
                setattr(owner, attribute, original)
            self._patches = []


def folder_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


async def timed(coroutine: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await coroutine
    return time.perf_counter() - started, result


async def pause_resume(folder: Path, sizes: tuple[int, ...], rounds: int, phases: Phases) -> dict[str, list[float]]:
    """Per size and round: a session holds ``mb`` MB, is paused into a checkpoint, resumed, and checked."""
    out: dict[str, list[float]] = {}
    for attempt in range(rounds):
        for mb in sizes:  # interleaved, so the machine's drift falls on every size
            name = f"pr-{mb}-{attempt}"
            session = Session(notebook=folder / f"{name}.ipynb", cwd=folder)
            await session.start()
            held = await session.execute(HOLD.format(mb=mb))
            assert held.ok and held.stdout == f"{mb}\n", held.text
            phases.reset()
            pause_s, checkpoint = await timed(session.checkpoint(folder / f"{name}.checkpoint"))
            for key, value in phases.reset().items():
                out.setdefault(f"pause_{key}_{mb}", []).append(value)
            out.setdefault(f"image_mb_{mb}", []).append(folder_mb(checkpoint / gate_live.IMAGE))
            started = time.perf_counter()
            resumed = Session.resume(checkpoint, cwd=folder)
            await resumed.start()
            resume_s = time.perf_counter() - started
            for key, value in phases.reset().items():
                out.setdefault(f"resume_{key}_{mb}", []).append(value)
            try:
                checked = await resumed.execute(CHECK)
                assert checked.ok and checked.stdout == f"{mb}\n", checked.text
            finally:
                await resumed.shutdown()
            shutil.rmtree(checkpoint, ignore_errors=True)
            out.setdefault(f"pause_{mb}", []).append(pause_s)
            out.setdefault(f"resume_{mb}", []).append(resume_s)
    return out


async def settle_used_mb() -> float:
    await asyncio.sleep(SETTLE_S)
    return used_mb()


async def fork_vs_cold(folder: Path, count: int, rounds: int, phases: Phases) -> dict[str, list[float]]:
    """Per round: ``count`` forks of an idle parent, then ``count`` independent sessions started at once; the wall
    time of each and the host memory their idle sessions took."""
    out: dict[str, list[float]] = {"forks": [count], "fork_s": [], "cold_s": [], "fork_mb": [], "cold_mb": [],
                                   "fork_image_mb": []}
    warm = Session(notebook=folder / "warm.ipynb", cwd=folder)  # the configuration's snapshot image exists
    await warm.start()
    await warm.shutdown()
    for attempt in range(rounds):
        async with Session(notebook=folder / f"parent-{attempt}.ipynb", cwd=folder) as parent:
            assert (await parent.execute("v = 'parent'")).ok
            before = await settle_used_mb()
            checkpoint = folder / f"parent-{attempt}.checkpoint"
            phases.reset()
            wall, forks = await timed(parent.fork(count, checkpoint))
            for key, value in phases.reset().items():
                out.setdefault(f"fork_{key}", []).append(value)
            try:
                out["fork_mb"].append(await settle_used_mb() - before)
                answers = await asyncio.gather(*(f.execute("print(v)") for f in forks))
                assert all(a.ok and a.stdout == "parent\n" for a in answers), [a.text for a in answers]
            finally:
                await asyncio.gather(*(f.shutdown() for f in forks), return_exceptions=True)
            out["fork_s"].append(wall)
            out["fork_image_mb"].append(folder_mb(checkpoint / gate_live.IMAGE))
            shutil.rmtree(checkpoint, ignore_errors=True)
        before = await settle_used_mb()
        sessions = [Session(notebook=folder / f"cold-{attempt}-{i}.ipynb", cwd=folder) for i in range(count)]
        try:
            wall, _ = await timed(asyncio.gather(*(s.start() for s in sessions)))
            out["cold_mb"].append(await settle_used_mb() - before)
            answers = await asyncio.gather(*(s.execute("print(6 * 7)") for s in sessions))
            assert all(a.ok and a.stdout == "42\n" for a in answers), [a.text for a in answers]
        finally:
            await asyncio.gather(*(s.shutdown() for s in sessions), return_exceptions=True)
        out["cold_s"].append(wall)
    return out


async def live(folder: Path, rounds: int, forks: int, fork_rounds: int) -> dict[str, list[float]]:
    (folder / "pr").mkdir()
    (folder / "fork").mkdir()
    with Phases().wrapped() as phases:
        out = await pause_resume(folder / "pr", (0, 100, 300), rounds, phases)
        out.update(await fork_vs_cold(folder / "fork", forks, fork_rounds, phases))
    return out


def rows(measured: dict[str, list[float]], row: Any) -> list[dict[str, Any]]:
    """The ``live`` section's rows. A per-100-MB sample is one round's slope from 100 to 300 MB held; a phase's ratio
    is its share of the whole it is part of (phases are timed by wrapping the gate's calls from outside)."""
    m = dict(measured)
    slope = {kind: [(big - small) / 2 for small, big in zip(m[f"{kind}_100"], m[f"{kind}_300"], strict=True)]
             for kind in ("pause", "resume")}
    if "pause_backend_checkpoint_0" in m and "pause_runsc_checkpoint_0" in m:
        m["pause_let_go_0"] = [whole - runsc - key for whole, runsc, key in zip(
            m["pause_backend_checkpoint_0"], m["pause_runsc_checkpoint_0"],
            m.get("pause_configuration_key_0", [0.0] * len(m["pause_0"])), strict=True)]
    forks = int(m["forks"][0])
    out = [
        row("pause, idle kernel (Session.checkpoint)", m["pause_0"], unit="s"),
        row("pause, 100 MB held", m["pause_100"], unit="s", baseline=m["pause_0"]),
        row("pause, 300 MB held", m["pause_300"], unit="s", baseline=m["pause_0"]),
        row("  pause s per 100 MB (E2B ~0.4: 4 s/GiB)", slope["pause"], unit="s"),
        ("pause_let_go_0", "  idle: kernel lets go of its sockets", "pause_0"),
        ("pause_shutdown_0", "  idle: sandbox removed (runsc delete)", "pause_0"),
        ("pause_runsc_checkpoint_300", "  300 MB: runsc checkpoint alone", "pause_300"),
        ("pause_image_sha256_300", "  300 MB: sha256 of the image (manifest)", "pause_300"),
        row("  checkpoint image, 300 MB held", m["image_mb_300"], unit="MB", baseline=m["image_mb_0"]),
        row("resume, idle kernel (E2B ~1 s)", m["resume_0"], unit="s"),
        row("resume, 100 MB held", m["resume_100"], unit="s", baseline=m["resume_0"]),
        row("resume, 300 MB held", m["resume_300"], unit="s", baseline=m["resume_0"]),
        row("  resume s per 100 MB", slope["resume"], unit="s"),
        ("resume_backend_restore_300", "  300 MB: runsc restore until sockets answer", "resume_300"),
        ("resume_image_sha256_300", "  300 MB: sha256 check of the image", "resume_300"),
        row(f"{forks} sessions started at once, wall", m["cold_s"], unit="s"),
        row(f"fork({forks}) of an idle session, wall", m["fork_s"], unit="s", baseline=m["cold_s"]),
        ("fork_fork_checkpoint", f"  fork({forks}): the parent's checkpoint", "fork_s"),
        row(f"host memory, {forks} idle sessions (free delta)", m["cold_mb"], unit="MB"),
        row(f"host memory, {forks} idle forks (free delta)", m["fork_mb"], unit="MB", baseline=m["cold_mb"]),
    ]
    return [entry if isinstance(entry, dict) else row(entry[1], m[entry[0]], unit="s", baseline=m[entry[2]])
            for entry in out if isinstance(entry, dict) or entry[0] in m]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2, help="pause/resume rounds of each size (idle, 100, 300 MB)")
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--fork-rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(live(Path(tmp), args.rounds, args.forks, args.fork_rounds))
    print(json.dumps({name: [round(v, 4) for v in values] for name, values in out.items()}, indent=1))


if __name__ == "__main__":
    main()
