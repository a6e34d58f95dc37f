"""Where a blocking tool runs: a daemon thread of its own, so a tool that never returns cannot hold the process.

A thread cannot be killed. A tool past its deadline (``[sandbox] call_timeout``) fails its call, but its
thread runs on; a ``ThreadPoolExecutor``'s workers are joined when the interpreter exits, so one tool stuck
on a network call kept ``cellgate exec`` and every ``Session`` script alive until it returned. These
threads are daemons: the process exits when the session ends, and the session journals the calls whose
threads were still running (``abandoned``).

At most ``max_running`` of a session run at once, those past their deadline included (a stuck tool keeps its
place), and at most ``PROCESS_RUNNING`` of all the sessions of the process (one gate process serving many, as
``cellgate mcp serve``, a ``Pool`` and the load benchmark do; ``process_slots``): a hundred threads building
results at once would share the interpreter's lock a hundred ways, so that each call's own run, which its deadline
measures, grew with the load. A call waits for both slots before its deadline starts (``Dispatcher``: that wait
has its own bound).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cellgate.gate.calls.process_slots import ProcessSlots

__all__ = ["PROCESS_RUNNING", "PROCESS_SLOTS", "Running", "ToolThreads"]

PROCESS_RUNNING = max(8, 4 * (os.cpu_count() or 1))  # tool threads running at once, all sessions of the process
PROCESS_SLOTS = ProcessSlots(PROCESS_RUNNING)


@dataclass(frozen=True)
class Running:
    """A call whose tool runs on a thread: what the journal names if the session ends before it returns."""

    seq: int
    id: str
    tool: str
    started: str  # when the call started (the call record's timestamp)


class ToolThreads:
    """Runs blocking tool functions of one session, each on a daemon thread."""

    def __init__(self, max_running: int, process_slots: ProcessSlots | None = None) -> None:
        self._slots = asyncio.Semaphore(max_running)
        self._process_slots = process_slots or PROCESS_SLOTS
        self._running: dict[int, Running] = {}
        self._keys = itertools.count()
        self._lock = threading.Lock()

    async def reserve(self) -> None:
        """Wait for a free slot of the session and of the process, which the next ``run`` takes (apart, so that
        the wait is bounded on its own)."""
        await self._slots.acquire()
        try:
            await self._process_slots.acquire()
        except BaseException:
            self._slots.release()
            raise

    async def run(self, job: Callable[[], Any], call: Running, deadline: float | None = None) -> Any:
        """Run ``job`` (in the caller's context) on its own thread, in the slot ``reserve`` took, waiting at most
        ``deadline`` seconds (then TimeoutError); giving up or cancelling the wait leaves the thread running: it
        keeps its session's slot until it ends, but gives the process's back at once (a stuck tool, most likely
        waiting on a network, must not hold up every other session's calls)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        key = next(self._keys)
        context = contextvars.copy_context()  # as asyncio.to_thread carries it
        held = [True]  # the process's slot, given back once: by the thread's end or the call giving up

        def give_back() -> None:
            with self._lock:
                if not held[0]:
                    return
                held[0] = False
            self._process_slots.release()

        def main() -> None:
            try:
                outcome: tuple[bool, Any] = (True, context.run(job))
            except BaseException as exc:  # handed to the waiting call, whatever it is
                outcome = (False, exc if isinstance(exc, Exception) else RuntimeError(f"{type(exc).__name__}: {exc}"))
            finally:
                with self._lock:
                    self._running.pop(key, None)
            give_back()  # here, not on the loop: other sessions' calls wait for it, loop or no loop
            try:
                loop.call_soon_threadsafe(self._settle, future, outcome)
            except RuntimeError:  # the session's loop is gone: nobody waits for this result
                pass

        with self._lock:
            self._running[key] = call
        try:
            threading.Thread(target=main, name=f"cellgate-tool-{call.tool}", daemon=True).start()
        except BaseException:
            with self._lock:
                self._running.pop(key, None)
            self._slots.release()
            give_back()
            raise
        try:
            # asyncio.wait, not a timeout around the await: when the deadline and the thread's result fall due in
            # one loop turn (a loop held up past the deadline: on a saturated host a disk write stalled it for
            # seconds), the result that is there wins; a timeout's cancellation would have thrown it away.
            done, _ = await asyncio.wait({future}, timeout=deadline)
        except BaseException:
            future.cancel()
            give_back()
            raise
        if not done:
            future.cancel()
            give_back()
            raise TimeoutError
        return future.result()

    def _settle(self, future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
        self._slots.release()
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
