"""Slots shared by every event loop of one process: the bound on tool threads running at once.

Each session's relay runs its own event loop on its own thread, so an ``asyncio.Semaphore`` (which belongs to
one loop) bounded a session, not the process: a hundred sessions of one process ran a hundred tool threads at
once, which shared the interpreter's lock a hundred ways, so that each call's own run, which its deadline
measures, grew with the load (on a saturated host past its deadline). These slots are counted under a thread
lock; a waiter on any loop is woken on its own loop, first come first served.
"""

from __future__ import annotations

import asyncio
import collections
import threading

__all__ = ["ProcessSlots"]


class ProcessSlots:
    """``size`` slots for waiters on any event loop of the process."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = size
        self._lock = threading.Lock()
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = \
            collections.deque()

    @property
    def free(self) -> int:
        with self._lock:
            return self._free

    async def acquire(self) -> None:
        """Take a slot, waiting for one; a cancelled wait takes none (a slot handed to it is passed on)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except BaseException:
            with self._lock:
                try:
                    self._waiters.remove((loop, waiter))
                    handed = False
                except ValueError:  # a release took it off the queue: a slot is on its way, or here
                    handed = True
            if handed and waiter.done() and not waiter.cancelled():
                self.release()  # it came before the cancellation did: give it back
            # (a slot still on its way finds the waiter cancelled and is released by ``_hand_over``)
            raise

    def release(self) -> None:
        """Give a slot back: to the longest waiter (on its own loop), else to the free count."""
        with self._lock:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(self._hand_over, waiter)
                    return
                except RuntimeError:  # that waiter's loop is closed: nobody is waiting there
                    continue
            self._free += 1

    def _hand_over(self, waiter: asyncio.Future[None]) -> None:
        """On the waiter's loop: the slot is its own, unless the wait was cancelled meanwhile."""
        if waiter.cancelled():
            self.release()
        else:
            waiter.set_result(None)
