"""``SyncSession``: the ``Session`` with blocking methods, safe to use from many threads at once.

For synchronous agent frameworks (smolagents, deepagents), scripts and tests::

    with SyncSession(tools=[list_orders], notebook="run.ipynb") as box:
        print(box.execute("print(tools.list_orders('2026-10')[:1])").text)

Each ``SyncSession`` runs one event loop on a private daemon thread and hands every call to it. Cells, host calls,
tool additions and restarts from several threads are queued in the order they arrive (one ``asyncio.Lock``, which
wakes its waiters first come, first served), so the audit notebook holds them in that order; ``interrupt`` and
``close`` do not queue (they are for the cell that is running).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cellgate.gate.calls.direct import DirectResult
from cellgate.gate.calls.program import ToolSpec
from cellgate.gate.session.commands import CommandResult
from cellgate.gate.session.files import FileRecord
from cellgate.gate.session.session import CellResult, Session

T = TypeVar("T")
_END = object()  # the end of a stream, handed from the loop to the reading thread


class SyncSession:
    """One ``Session`` driven from synchronous code; the constructor takes exactly ``Session``'s arguments.

    ``session`` is the underlying ``Session`` (its properties -- ``manifest``, ``recorder``, ``policy`` -- are
    safe to read; its coroutines belong to this object's loop, ``run_async`` runs one there).
    """

    def __init__(self, **options: Any) -> None:
        self.session = Session(**options)
        self._loop = asyncio.new_event_loop()
        self._turn: asyncio.Lock | None = None  # made on the loop: one cell (or host call) at a time, in order
        self._thread = threading.Thread(target=self._loop.run_forever, name="cellgate-sync-session", daemon=True)
        self._thread.start()

    # -------------------------------------------------------------- the loop
    def run_async(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on this session's loop and wait for it (``timeout`` seconds at most, None: no bound)."""
        self._off_the_loop(coro)
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _off_the_loop(self, coro: Coroutine[Any, Any, Any]) -> None:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a SyncSession method was called on its own loop (e.g. from an on_output "
                               "callback); it would wait for itself: use session (the async Session) there")

    _run = run_async  # the name tests written for testing.BlockingSession use

    async def _queued(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._turn is None:
            self._turn = asyncio.Lock()
        try:
            async with self._turn:
                return await coro
        finally:
            coro.close()  # never started if the lock wait was cancelled: no "never awaited" warning

    def _in_turn(self, coro: Coroutine[Any, Any, T]) -> T:
        self._off_the_loop(coro)
        return self.run_async(self._queued(coro))

    # -------------------------------------------------------------- lifecycle
    def start(self) -> SyncSession:
        """Start the sandboxed kernel; if that fails, the loop thread is stopped too (nothing is left running)."""
        try:
            self._in_turn(self.session.start())
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Shut the kernel down and stop the loop thread (a second call does nothing)."""
        if self._loop.is_closed():
            return
        try:
            self.run_async(self.session.shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> SyncSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- live (``session.live``)
    def checkpoint(self, path: str | Path | None = None) -> Path:
        """Pause the session into a checkpoint (see ``Session.checkpoint``), after the cells queued before it; the
        session ends and its loop thread stops. ``SyncSession.resume(path, ...)`` continues it."""
        try:
            return self._in_turn(self.session.checkpoint(path))
        finally:
            self.close()

    @classmethod
    def resume(cls, path: str | Path, **options: Any) -> SyncSession:
        """A session continuing checkpoint ``path`` when started (see ``Session.resume``); ``fork`` and ``trial``
        are the async ``Session``'s."""
        sync = cls(**options)
        try:
            sync.session = Session.resume(path, **options)
        except BaseException:
            sync.close()
            raise
        return sync

    # -------------------------------------------------------------- running
    def execute(self, code: str, timeout: float | None = None,
                on_output: Callable[[dict[str, Any]], None] | None = None, retry: bool = False) -> CellResult:
        """Run ``code`` as one cell, after the cells queued before it; ``on_output`` is called on the session's
        loop thread with each output as it is recorded (keep it short; do not call this object from it).
        ``retry``: a retry of the last failed cell (``Session.execute``)."""
        return self._in_turn(self.session.execute(code, timeout, on_output=on_output, retry=retry))

    def stream(self, code: str, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """The cell's outputs and call events as they happen, then ``{"event": "end", "result": CellResult}``
        (see ``Session.stream``). Leaving the loop early lets the cell run on to its end (the next queued cell waits for it)."""
        items: queue.SimpleQueue[Any] = queue.SimpleQueue()

        async def pump() -> None:
            try:
                async for item in self.session.stream(code, timeout):
                    items.put(item)
            except BaseException as error:  # handed to the reading thread, which raises it
                items.put(error)
            finally:
                items.put(_END)

        asyncio.run_coroutine_threadsafe(self._queued(pump()), self._loop)
        while (item := items.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item

    def call_tool(self, tool: str, args: dict[str, Any]) -> DirectResult:
        """Call a tool from the host (a model's direct tool use): gated and recorded as a ``direct`` cell."""
        return self._in_turn(self.session.call_tool(tool, args))

    def add_tools(self, *tools: ToolSpec) -> None:
        """Add tools to the running session (see ``Session.add_tools``), queued as a cell is."""
        self._in_turn(self.session.add_tools(*tools))

    def restart(self) -> None:
        """A fresh sandboxed kernel, after the cells queued before it (variables are gone)."""
        self._in_turn(self.session.restart())

    def interrupt(self) -> None:
        """Interrupt the running cell now (not queued); it ends ``interrupted``."""
        self.run_async(self.session.interrupt())

    def run_command(self, argv: Sequence[str], timeout: float | None = None) -> CommandResult:
        """Run a command in the sandbox (see ``Session.run_command``), queued as a cell is."""
        return self._in_turn(self.session.run_command(argv, timeout=timeout))

    def upload(self, path: str, data: bytes) -> FileRecord:
        """Put a file into the sandbox (see ``Session.upload``), queued as a cell is."""
        return self._in_turn(self.session.upload(path, data))

    def download(self, path: str) -> bytes:
        """A file's bytes from the sandbox (see ``Session.download``), queued as a cell is."""
        return self._in_turn(self.session.download(path))

    @property
    def notebook_path(self) -> Path:
        return self.session.notebook_path
