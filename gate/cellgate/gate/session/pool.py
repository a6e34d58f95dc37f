"""A warm pool of sandboxed sessions: started ahead, each handed out once.

``acquire()`` returns a session whose sandbox is already up (the ~1.5 s
gVisor start is paid in the background) and starts its replacement. A
session is never reused: ``release()`` shuts it down, so no state or file
crosses from one user to the next. ``max_sessions`` caps how many exist at
once; past it, ``acquire()`` waits up to ``acquire_timeout`` and then raises
``PoolExhausted`` saying so.

``Pool.from_session`` warms a pool from a running session instead: every
session it hands out is a fork of that session's kernel as it was (data
loaded, modules imported), restored from one checkpoint (``session.live``),
which stays while the pool may start members from it and is deleted when the
pool closes (kept only in a folder the caller named, ``path``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cellgate.gate._errors import PoolExhausted
from cellgate.gate.audit.record_paths import existing_parts
from cellgate.gate.session import live
from cellgate.gate.session.session import Session


class Pool:
    def __init__(self, size: int, *, max_sessions: int | None = None, acquire_timeout: float = 60.0,
                 notebook_dir: str | Path | None = None, **session_options: Any) -> None:
        if size < 1:
            raise ValueError(f"pool size must be at least 1, got {size}")
        self.size = size
        self.max_sessions = max_sessions or size * 4
        self.acquire_timeout = acquire_timeout
        self._options = session_options
        self._notebook_dir = Path(notebook_dir) if notebook_dir else None
        self._ready: asyncio.Queue[Session] = asyncio.Queue()
        self._slots = asyncio.Semaphore(self.max_sessions)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._starting: set[asyncio.Task[Any]] = set()  # past the slot: a sandbox is being started
        self._numbers = itertools.count(1)
        self._forks = itertools.count(1)
        self._closed = False
        self._errors: list[BaseException] = []
        self._make: Callable[[dict[str, Any], int], Session] = lambda options, _number: Session(**options)
        self._checkpoint: live.Checkpoint | None = None  # ``from_session``'s, deleted at close

    @classmethod
    async def from_session(cls, session: Session, size: int, *, max_sessions: int | None = None,
                           acquire_timeout: float = 60.0, path: str | Path | None = None) -> Pool:
        """A started pool of forks of ``session`` as it is now (its kernel saved once, into the new folder
        ``path``; the session goes on): each acquired session holds what ``session`` held, with its own
        sandbox, gate and notebook naming ``session``'s. Every member starts from that checkpoint, so it stays
        until the pool closes; then it is deleted (default: beside the notebook) or kept (``path``)."""
        checkpoint = await live.fork(session, None, path)
        pool = cls(size, max_sessions=max_sessions, acquire_timeout=acquire_timeout)
        pool._checkpoint = checkpoint  # its plaintext goes at close (a folder ``path`` named stays, sealed)
        lineage, limit = session.provisioner.gate.lineage, session.policy.max_calls_per_session
        pool._make = lambda _options, number: session._forked(  # each draws on the session's budgets (its lineage)
            live.fork_options(checkpoint, session.launch_options, number, None, lineage,
                              {"lineage": lineage.id, "left": lineage.left(limit)}))
        return await pool.start()

    async def start(self) -> Pool:
        for _ in range(self.size):
            self._warm()
        return self

    def _warm(self) -> None:
        task = asyncio.ensure_future(self._start_one())
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        """A start's task ended: a failure it did not keep itself (a session the closed pool could not shut
        down, a queue that broke) is kept like a failed start, so wait_warm, acquire and close raise it."""
        self._tasks.discard(task)
        self._starting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._errors.append(task.exception())  # type: ignore[arg-type]  # not None: checked above

    async def _start_one(self) -> None:
        await self._slots.acquire()
        if self._closed:  # closed while this waited for a slot: start nothing
            self._slots.release()
            return
        self._starting.add(asyncio.current_task())  # type: ignore[arg-type]  # a task runs this
        options = dict(self._options)
        if self._notebook_dir is not None:
            options["notebook"] = self._next_notebook(self._notebook_dir)
        session = self._make(options, next(self._forks))
        try:
            await session.start()
        except BaseException as exc:
            self._slots.release()
            if not isinstance(exc, Exception):
                raise  # cancelled (close) or the process is ending
            # Owned, not raised into a task nobody reads: wait_warm raises it and acquire's PoolExhausted names it.
            self._errors.append(exc)
            return
        if self._closed:
            await self._discard(session)
            return
        await self._ready.put(session)

    def _next_notebook(self, folder: Path) -> Path:
        """The pool's own names, numbered on past the records an earlier pool left in the folder."""
        while existing_parts(path := folder / f"pool-{next(self._numbers)}.ipynb"):
            pass
        return path

    @property
    def warm(self) -> list[Session]:
        """The sessions started and waiting to be handed out."""
        return list(self._ready._queue)  # type: ignore[attr-defined]

    async def wait_warm(self, count: int | None = None, timeout: float = 120.0) -> None:
        """Wait until ``count`` (default: size) sessions are ready."""
        async with asyncio.timeout(timeout):
            while len(self.warm) < (count or self.size):
                if self._errors:
                    raise self._errors[-1]
                await asyncio.sleep(0.05)

    async def acquire(self) -> Session:
        """A started session for one user; its replacement starts now."""
        if self._closed:
            raise PoolExhausted("the pool is closed")
        try:
            async with asyncio.timeout(self.acquire_timeout):  # not wait_for: see calls.dispatch._run
                session = await self._ready.get()
        except TimeoutError:
            detail = f"; the last start failed: {self._errors[-1]}" if self._errors else ""
            raise PoolExhausted(
                f"no sandboxed session became free within {self.acquire_timeout:g} s (at most "
                f"{self.max_sessions} exist at once){detail}; release sessions or raise max_sessions") from None
        self._warm()
        return session

    async def release(self, session: Session) -> None:
        """End a session for good (sessions are never handed out twice)."""
        await self._discard(session)

    async def _discard(self, session: Session) -> None:
        try:
            await session.shutdown()
        finally:
            self._slots.release()

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks - self._starting:  # waiting for a slot: nothing started yet
            task.cancel()
        # A start under way is not cut short (its sandbox, a pod, would be left running): it ends, and is discarded.
        ended = await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._checkpoint is not None:  # every start has ended and none can begin: no member reads it again
            live.discard(self._checkpoint)
            self._checkpoint = None
        ready = []
        while not self._ready.empty():
            ready.append(self._ready.get_nowait())
        discarded = await asyncio.gather(*(self._discard(session) for session in ready), return_exceptions=True)
        # Every session is shut down whatever one of them does; a failure is then raised, not dropped.
        failed = [e for e in (*ended, *discarded) if isinstance(e, Exception)]
        if failed:
            raise failed[0]

    async def __aenter__(self) -> Pool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
