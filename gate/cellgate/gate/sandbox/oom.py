"""Knowing that a sandbox died of its memory limit (the cgroup backstop), not of something else.

runsc removes the sandbox's cgroup as it exits, so the OOM counter cannot be
read after the death is noticed. On cgroup v1 the memory controller signals
an eventfd the moment the cgroup hits OOM (``cgroup.event_control``); on
cgroup v2 the parent ``cellgate`` cgroup's ``memory.events`` counts OOM kills
of its children hierarchically and outlives them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


class OomWatch:
    """Started when a sandbox is attached; ``hit`` says whether its memory cgroup ran out."""

    def __init__(self, sandbox_id: str, on_oom: Callable[[], None]) -> None:
        self.sandbox_id = sandbox_id
        self.on_oom = on_oom
        self._fired = False
        self._fds: list[int] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._v2_events = CGROUP_ROOT / "cellgate" / "memory.events"
        self._v2_before = self._v2_kills()

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Arm the v1 eventfd; False when neither v1 nor v2 accounting is available."""
        v1 = CGROUP_ROOT / "memory" / "cellgate" / self.sandbox_id
        if not (v1 / "memory.oom_control").exists():
            return self._v2_before is not None
        try:
            event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self._fds.append(event)
            control = os.open(v1 / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
            self._fds.append(control)
            (v1 / "cgroup.event_control").write_text(f"{event} {control}")
        except OSError:
            self.close()
            return self._v2_before is not None
        self._loop = loop
        loop.add_reader(event, self._signalled)
        return True

    def _signalled(self) -> None:
        try:
            os.eventfd_read(self._fds[0])
        except OSError:
            return
        if not self._fired:
            self._fired = True
            self.on_oom()

    def _v2_kills(self) -> int | None:
        try:
            for line in self._v2_events.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            return None
        return None

    @property
    def hit(self) -> bool:
        if self._fired:
            return True
        now = self._v2_kills()
        return now is not None and self._v2_before is not None and now > self._v2_before

    def close(self) -> None:
        if self._loop is not None and self._fds:
            self._loop.remove_reader(self._fds[0])
            self._loop = None
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
