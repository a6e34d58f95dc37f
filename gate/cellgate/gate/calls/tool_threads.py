"""Where a blocking tool runs: a daemon thread of its own, so a tool that never returns cannot hold the process.

A thread cannot be killed. A tool past its deadline (``[sandbox] call_timeout``) fails its call, but its
thread runs on; a ``ThreadPoolExecutor``'s workers are joined when the interpreter exits, so one tool stuck
on a network call kept ``cellgate exec`` and every ``Session`` script alive until it returned. These
threads are daemons: the process exits when the session ends, and the session journals the calls whose
threads were still running (``abandoned``).

At most ``max_running`` run at once, those past their deadline included (a stuck tool keeps its place).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Running", "ToolThreads"]


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

    async def run(self, job: Callable[[], Any], call: Running) -> Any:
        """Run ``job`` (in the caller's context) on its own thread; cancelling the wait leaves the thread running."""
        loop = asyncio.get_running_loop()
        await self._slots.acquire()
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
            raise
        return await future

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
