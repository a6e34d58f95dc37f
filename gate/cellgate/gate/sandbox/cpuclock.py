"""The cell's clock while one of its calls waits for a person: the sandbox's CPU time, not wall time.

Time spent waiting for an approval does not count against ``cell_timeout``
(a person may take minutes). But other threads of the cell keep running
meanwhile, so while a call waits the cell's remaining budget is spent at the
rate the whole sandbox uses CPU: a cell that only waits spends almost
nothing; one whose main thread computes meanwhile reaches its limit after
``cell_timeout`` seconds of CPU (sooner on several cores) and is interrupted
as at any timeout.

The CPU time is the sandbox cgroup's (``runsc`` puts every sandbox in
``/cellgate/<id>``: cgroup v1 ``cpuacct.usage``, v2 ``cpu.stat``), which covers
every thread and process in it, gVisor's own included. A sandbox started
without root has no cgroup: it is measured by the CPU time of runsc's whole
process tree from ``/proc`` (the Sentry, the gofer and the systrap stubs that
run the sandbox's code). A sandbox without gVisor (isolation ``none``) is
measured by its kernel process's CPU time; when nothing can be read, the wall
clock keeps running while a call waits (never free compute).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


POLL_SECONDS = 0.1
MAX_TREE = 4096  # processes walked in one process tree: more is not a sandbox's tree


def _process_seconds(pid: int) -> int:
    """utime + stime + cutime + cstime of one process, in clock ticks (OSError when gone)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15])


def _tree_ticks(root: int) -> int | None:
    """CPU ticks of ``root`` and every live descendant (a reaped one is in its parent's cutime); None if gone."""
    total, pending, seen = 0, [root], set[int]()
    while pending and len(seen) < MAX_TREE:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            total += _process_seconds(pid)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    pending.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError, IndexError):
            if pid == root:
                return None
    return total


class CpuSource:
    """Seconds of CPU one sandbox has used so far, or None when it cannot be read."""

    def __init__(self, sandbox_id: str | None, pid: int | None, tree: bool = False) -> None:
        self._paths: list[Path] = []
        if sandbox_id:
            self._paths = [CGROUP_ROOT / "cpuacct" / "cellgate" / sandbox_id / "cpuacct.usage",
                           CGROUP_ROOT / "cpu,cpuacct" / "cellgate" / sandbox_id / "cpuacct.usage",
                           CGROUP_ROOT / "cellgate" / sandbox_id / "cpu.stat"]
        self._pid = pid
        self._tree = tree  # the CPU time of ``pid`` and all its descendants, not only its own
        self._ticks = os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float | None:
        for path in self._paths:
            try:
                text = path.read_text()
            except OSError:
                continue
            if path.name == "cpuacct.usage":
                return int(text.strip()) / 1e9
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        if self._pid is not None and self._tree:
            ticks = _tree_ticks(self._pid)
            return None if ticks is None else ticks / self._ticks
        if self._pid is not None:
            try:
                return _process_seconds(self._pid) / self._ticks
            except (OSError, ValueError, IndexError):
                return None
        return None


class CpuClock:
    """Spends ``remaining`` seconds of a cell's budget at the sandbox's CPU rate; calls ``expired`` at zero.

    Stands in for the cell's wall-clock timer while calls wait for a person
    (``cancel`` like a TimerHandle; ``spent`` says how much of the budget went).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, source: CpuSource, remaining: float,
                 expired: Callable[[], None]) -> None:
        self._loop = loop
        self._source = source
        self._remaining = remaining
        self._expired = expired
        self._handle: asyncio.TimerHandle | None = None
        self._cancelled = False
        self._started_wall = loop.time()
        start = source.seconds()
        self._start_cpu = start
        if start is None:  # nothing to measure CPU with: the wall clock keeps running
            self._handle = loop.call_later(max(remaining, 0.0), self._fire)
        else:
            self._poll()

    def spent(self) -> float:
        if self._start_cpu is None:
            return self._loop.time() - self._started_wall
        now = self._source.seconds()
        return 0.0 if now is None else max(0.0, now - self._start_cpu)

    def _poll(self) -> None:
        if self._cancelled:
            return
        left = self._remaining - self.spent()
        if left <= 0:
            self._fire()
            return
        self._handle = self._loop.call_later(min(POLL_SECONDS, left), self._poll)

    def _fire(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            self._expired()

    def cancel(self) -> None:
        self._cancelled = True
        if self._handle is not None:
            self._handle.cancel()
