"""Where a blocking tool runs: a daemon thread of its own, so a tool that never returns cannot hold the process.

A thread cannot be killed. A tool past its deadline (``[sandbox] call_timeout``) fails its call, but its
thread runs on; a ``ThreadPoolExecutor``'s workers are joined when the interpreter exits, so one tool stuck
on a network call kept ``cellgate exec`` and every ``Session`` script alive until it returned. These
threads are daemons: the process exits when the session ends, and the session journals the calls whose
threads were still running (``abandoned``).

At most ``max_running`` of a session run at once, those past their deadline included (a stuck tool keeps its
place), and at most ``PROCESS_RUNNING`` of all the sessions on one event loop (one gate process serving many, as
``cellgate mcp serve`` and a ``Pool`` do): a hundred threads building results at once would share the
interpreter's lock a hundred ways, so that each call's own run, which its deadline measures, grew with the load.
A call waits for both slots before its deadline starts (``Dispatcher``: that wait has its own bound).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PROCESS_RUNNING", "Running", "ToolThreads"]

PROCESS_RUNNING = max(8, 4 * (os.cpu_count() or 1))  # tool threads running at once, all sessions of one loop
_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _loop_slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _shared.get(loop)
    if slots is None:
        slots = _shared[loop] = asyncio.Semaphore(PROCESS_RUNNING)
    return slots


@dataclass(frozen=True)
class Running:
    """A call whose tool runs on a thread: what the journal names if the session ends before it returns."""

    seq: int
    id: str
    tool: str
    started: str  # when the call started (the call record's timestamp)


class ToolThreads:
    """Runs blocking tool functions of one session, each on a daemon thread."""

    def __init__(self, max_running: int) -> None:
        self._slots = asyncio.Semaphore(max_running)
        self._running: dict[int, Running] = {}
        self._keys = itertools.count()
        self._lock = threading.Lock()

    async def reserve(self) -> None:
        """Wait for a free slot of the session and of the loop, which the next ``run`` takes (apart, so that the
        wait is bounded on its own)."""
        await self._slots.acquire()
        try:
            await _loop_slots().acquire()
        except BaseException:
            self._slots.release()
            raise

    def _release(self, loop_slots: asyncio.Semaphore) -> None:
        self._slots.release()
        loop_slots.release()

    async def run(self, job: Callable[[], Any], call: Running, deadline: float | None = None) -> Any:
        """Run ``job`` (in the caller's context) on its own thread, in the slot ``reserve`` took, waiting at most
        ``deadline`` seconds (then TimeoutError); giving up or cancelling the wait leaves the thread running (its
        slot is freed when it ends)."""
        loop = asyncio.get_running_loop()
        loop_slots = _loop_slots()
        future: asyncio.Future[Any] = loop.create_future()
        key = next(self._keys)
        context = contextvars.copy_context()  # as asyncio.to_thread carries it

        def main() -> None:
            try:
                outcome: tuple[bool, Any] = (True, context.run(job))
            except BaseException as exc:  # handed to the waiting call, whatever it is
                outcome = (False, exc if isinstance(exc, Exception) else RuntimeError(f"{type(exc).__name__}: {exc}"))
            finally:
                with self._lock:
                    self._running.pop(key, None)
            try:
                loop.call_soon_threadsafe(self._settle, future, outcome, loop_slots)
            except RuntimeError:  # the session's loop is gone: nobody waits for this result
                pass

        with self._lock:
            self._running[key] = call
        try:
            threading.Thread(target=main, name=f"cellgate-tool-{call.tool}", daemon=True).start()
        except BaseException:
            with self._lock:
                self._running.pop(key, None)
            self._release(loop_slots)
            raise
        try:
            # asyncio.wait, not a timeout around the await: when the deadline and the thread's result fall due in
            # one loop turn (a loop held up past the deadline: on a saturated host a disk write stalled it for
            # seconds), the result that is there wins; a timeout's cancellation would have thrown it away.
            done, _ = await asyncio.wait({future}, timeout=deadline)
        except BaseException:
            future.cancel()
            raise
        if not done:
            future.cancel()
            raise TimeoutError
        return future.result()

    def _settle(self, future: asyncio.Future[Any], outcome: tuple[bool, Any], loop_slots: asyncio.Semaphore) -> None:
        self._release(loop_slots)
        if future.done():  # the call gave up waiting (its deadline passed, or its cell ended)
            return
        ok, value = outcome
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def abandon(self) -> list[Running]:
        """The session ends: the calls whose threads still run (left to the process's exit), by sequence."""
        with self._lock:
            return sorted(self._running.values(), key=lambda call: call.seq)
