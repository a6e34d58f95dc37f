"""Knowing that a sandbox died of its memory limit (the cgroup backstop), not of something else.

runsc removes the sandbox's cgroup as it exits, so its OOM counter cannot be
read after the death is noticed.

- cgroup v1: the memory controller signals an eventfd (``cgroup.event_control``
  on ``memory.oom_control``) each time the cgroup goes out of memory, and once
  more when the cgroup is removed (measured on this machine: an rmdir of a
  cgroup that never ran out signals it once). A signal alone is therefore no
  OOM: it is one when the cgroup's own ``memory.oom_control`` still reads
  ``oom_kill`` (or ``under_oom``) above 0, or, once the cgroup is gone, when it was signalled
  more than the one time its removal accounts for. The parent's ``oom_kill``
  does not count its children's kills on v1 (measured), so it cannot be used.
- cgroup v2: the parent ``cellgate`` cgroup's ``memory.events`` counts OOM
  kills of its children hierarchically and outlives them; its removal
  counts nothing.
- Without root, a sandbox in a delegated cgroup (``cgroups``): the same, on
  that cgroup (``memory_cgroup``), which cellgate removes itself after the
  death is noticed: v1 as above, v2 its own ``memory.events``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _counter(path: Path, key: str) -> int | None:
    """``key``'s value in a cgroup file of "key value" lines; None when unreadable (the cgroup is gone)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


class OomWatch:
    """Started when a sandbox is attached; ``hit`` says whether its memory cgroup ran out."""

    def __init__(self, sandbox_id: str, on_oom: Callable[[], None], memory_cgroup: Path | None = None) -> None:
        self.sandbox_id = sandbox_id
        self.on_oom = on_oom
        self._fired = False
        self._oom_seen = False  # the v1 cgroup's own oom_kill counter was read above 0
        self._signals = 0  # v1 eventfd signals so far: each OOM, plus one when the cgroup is removed
        self._fds: list[int] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._v1 = memory_cgroup or CGROUP_ROOT / "memory" / "cellgate" / sandbox_id
        self._v2_events = (memory_cgroup or CGROUP_ROOT / "cellgate") / "memory.events"
        self._v2_before = _counter(self._v2_events, "oom_kill")

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Arm the v1 eventfd; False when neither v1 nor v2 accounting is available."""
        if not (self._v1 / "memory.oom_control").exists():
            return self._v2_before is not None
        try:
            event = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            self._fds.append(event)
            control = os.open(self._v1 / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
            self._fds.append(control)
            (self._v1 / "cgroup.event_control").write_text(f"{event} {control}")
        except OSError:
            self.close()
            return self._v2_before is not None
        self._loop = loop
        loop.add_reader(event, self._v1_oom)
        return True

    def _v1_oom(self) -> bool:
        """Read the eventfd's signals and decide from them and the cgroup's own counter (see the docstring)."""
        if self._fds:
            try:
                self._signals += os.eventfd_read(self._fds[0])
            except OSError:  # nothing new (EAGAIN) or closed
                pass
        if not self._oom_seen and self._signals:
            control = self._v1 / "memory.oom_control"
            kills, under = _counter(control, "oom_kill"), _counter(control, "under_oom")
            if kills is not None:  # signalled as it went out of memory, maybe before the kill was counted
                self._oom_seen = kills > 0 or bool(under)
            else:  # removed: its removal accounts for one signal
                self._oom_seen = self._signals > 1
        if self._oom_seen and not self._fired:
            self._fired = True
            self.on_oom()
        return self._oom_seen

    @property
    def hit(self) -> bool:
        if self._v1_oom():
            return True
        now = _counter(self._v2_events, "oom_kill")
        return now is not None and self._v2_before is not None and now > self._v2_before

    def close(self) -> None:
        if self._loop is not None and self._fds:
            self._loop.remove_reader(self._fds[0])
            self._loop = None
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
