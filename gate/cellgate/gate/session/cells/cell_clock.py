"""A running cell's wall-clock budget (``[sandbox] cell_timeout``).

While one of the cell's calls waits for a person the wall clock stops and the
budget is spent at the sandbox's CPU rate instead (``cpuclock``): a person's
slowness does not time the cell out, and a program cannot idle past its
timeout by asking. The dispatcher pauses and resumes it (``calls.asking.CellClock``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from cellgate.gate.sandbox.cpuclock import CpuClock, CpuSource


class CellClock:
    def __init__(self, loop: asyncio.AbstractEventLoop, budget: float, cpu: Callable[[], CpuSource],
                 on_expired: Callable[[], None]) -> None:
        self._loop = loop
        self._cpu = cpu
        self._on_expired = on_expired
        self.remaining = budget
        self.expired = False
        self._timer: asyncio.TimerHandle | CpuClock | None = None
        self._resumed_at = 0.0
        self._waiting = 0  # calls of the cell waiting for a person
        self._stopped = False

    def start(self) -> None:
        self._resumed_at = self._loop.time()
        self._timer = self._loop.call_later(self.remaining, self._expire)

    def _expire(self) -> None:
        if not self._stopped:
            self.expired = True
            self._on_expired()

    def pause(self) -> None:
        """A call of the cell starts waiting for a person."""
        if self._stopped or self.expired or self._timer is None:
            return
        self._waiting += 1
        if self._waiting == 1:
            self._timer.cancel()
            self.remaining -= self._loop.time() - self._resumed_at
            self._timer = CpuClock(self._loop, self._cpu(), self.remaining, self._expire)

    def resume(self) -> None:
        """A call of the cell stopped waiting for a person."""
        if self._stopped or self.expired or self._timer is None:
            return
        self._waiting = max(0, self._waiting - 1)
        if self._waiting == 0:
            if isinstance(self._timer, CpuClock):
                self._timer.cancel()
                self.remaining -= self._timer.spent()
            self.start()

    def then(self, seconds: float, callback: Callable[[], None]) -> None:
        """After expiry: run ``callback`` ``seconds`` later (the grace after the interrupt) unless stopped."""
        self._timer = self._loop.call_later(seconds, lambda: None if self._stopped else callback())

    @property
    def started(self) -> bool:
        return self._timer is not None

    def stop(self) -> None:
        """The cell ended."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
