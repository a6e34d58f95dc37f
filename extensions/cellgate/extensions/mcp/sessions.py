"""The sandboxed sessions of ``cellgate mcp serve``, by handle, each owned by the principal that started it.

A handle is a 128-bit random capability, and with ``[mcp.auth]`` it is only
good in its owner's hands: another principal presenting it gets the very
error an unknown handle gets (``unknown``), so it learns nothing, not even
that the handle exists. ``[mcp.quotas]`` bounds each principal: sessions open
at once, ``execute_python`` calls per session and per hour; one principal
reaching a limit leaves the others as they were.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from cellgate.gate import Pool, Session

from .auth import Principal
from .config import McpQuotas

HOUR = 3600.0
PRINCIPAL_EVENT = "mcp-principal"  # journal event: who owns the session (rendered by events.render_principal)

_log = logging.getLogger(__name__)


@dataclass
class _Entry:
    session: Session
    owner: Principal | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)
    calls: int = 0


Opener = Callable[[Principal | None], Awaitable[Session]]  # a started session for a principal (before it is claimed)


class Sessions:
    """Sandboxed sessions by handle.

    No lock is held across a sandbox start or end: every check of a quota and the count it checks happen in one
    step of the event loop (nothing between them awaits), and a session being started holds its place in the
    counts (``_starting``) from before its start to its entry, or gives it back when the start fails. So one
    principal's slow start never stalls another principal's calls, and the quotas are exact under concurrency.
    """

    def __init__(self, options: dict[str, Any], single_client: bool, max_sessions: int, idle_timeout: float,
                 pool_size: int = 0, quotas: McpQuotas | None = None, opener: Opener | None = None) -> None:
        """``opener`` starts a session for a principal (a test's hook); by default a warm pool's or a new one."""
        self.options = options
        self.pool_size = pool_size
        self.pool: Pool | None = None
        self.single_client = single_client
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.quotas = quotas or McpQuotas()
        self._opener = opener or self._open_sandbox
        self._entries: dict[str, _Entry] = {}
        self._starting: Counter[Principal | None] = Counter()  # sessions being started, by owner
        self._calls: dict[Principal | None, deque[float]] = {}  # when each principal's calls of the last hour began
        self._default: str | None = None
        self._one_client = asyncio.Lock()  # stdio: the client's calls without a handle share its one session
        self._closed = False
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start closing idle sessions on a timer; with ``[sandbox] pool = N``, start N sandboxes now, so a new
        session does not wait for one."""
        self._sweeper = asyncio.create_task(self._sweep_idle())
        if self.pool_size:
            self.pool = Pool(self.pool_size, max_sessions=self.max_sessions,
                             **self.options, metadata={"pool": {"size": self.pool_size}})
            await self.pool.start()

    async def _open_sandbox(self, owner: Principal | None) -> Session:
        return await self.pool.acquire() if self.pool is not None else await Session(**self.options).start()

    async def _new_session(self, owner: Principal | None) -> Session:
        session = await self._opener(owner)
        if owner is not None:  # a pooled sandbox started before anyone asked: its owner is set when claimed
            session.claim(owner.name)
            session.recorder.event(PRINCIPAL_EVENT, sync=True, principal=owner.record())
            session.recorder.write_notebook()
        return session

    async def _end(self, session: Session) -> None:
        if self.pool is not None:
            await self.pool.release(session)
        else:
            await session.shutdown()

    def unknown(self, handle: str) -> ToolError:
        """The one refusal for a handle that is not the caller's: closed, timed out, never made, or another's."""
        return ToolError(f"no session {handle[:80]!r} on this server (it was closed, timed out after "
                         f"{self.idle_timeout:g} s idle, or never existed); call execute_python without "
                         "`session` to start a new one")

    def _owned(self, handle: str, owner: Principal | None) -> _Entry:
        entry = self._entries.get(handle)
        if entry is None or entry.owner != owner:
            raise self.unknown(handle)
        return entry

    async def admit(self, handle: str | None, owner: Principal | None) -> tuple[str, _Entry]:
        """The session one ``execute_python`` call runs in (a new one without a handle), within the quotas."""
        await self._end_each(self._take_idle())  # their places are free now; only this call waits for the ends
        if handle is None and self.single_client:
            async with self._one_client:
                if self._default not in self._entries:
                    self._default = await self._open(owner)
                    return self._default, self._entries[self._default]
            handle = self._default
        if handle is None:
            handle = await self._open(owner)
            return handle, self._entries[handle]
        entry = self._owned(handle, owner)
        self._check_calls(entry, owner)
        self._count_call(entry, owner)
        return handle, entry

    async def _open(self, owner: Principal | None) -> str:
        """A new session of ``owner``, its first call counted: its place and the call are taken before the start
        (so concurrent admissions count them) and given back if the start fails."""
        self._check_calls(None, owner)
        self._check_sessions(owner)
        began = self._count_call(None, owner)
        self._starting[owner] += 1
        try:
            session = await self._new_session(owner)
        except BaseException:
            if began is not None:
                self._calls[owner].remove(began)
            raise
        finally:
            self._starting[owner] -= 1
            if not self._starting[owner]:
                del self._starting[owner]
        if self._closed:  # the server stopped while it started
            await self._end(session)
            raise ToolError("this server is stopping; no new session was started")
        handle = secrets.token_urlsafe(16)
        self._entries[handle] = _Entry(session, owner, calls=1)
        return handle

    def _count_call(self, entry: _Entry | None, owner: Principal | None) -> float | None:
        """Count one call (in ``entry``, and in the hour when a limit wants it); the hour's stamp, if kept."""
        now = time.monotonic()
        if entry is not None:
            entry.used = now
            entry.calls += 1
        if self.quotas.of(_name(owner)).calls_per_hour is None:
            return None
        self._calls.setdefault(owner, deque()).append(now)
        return now

    def _check_sessions(self, owner: Principal | None) -> None:
        running = len(self._entries) + sum(self._starting.values())
        if running >= self.max_sessions:
            raise ToolError(f"this server already runs or starts {running} sessions (--max-sessions "
                            f"{self.max_sessions}); close one with close_session, or try again later")
        limit = self.quotas.of(_name(owner)).sessions
        mine = sum(1 for e in self._entries.values() if e.owner == owner) + self._starting[owner]
        if limit is not None and mine >= limit:
            raise ToolError(f"{_who(owner)} already has {mine} sessions open, the most allowed ([mcp.quotas] "
                            f"sessions = {limit}); pass the `session` of one of them, or end one with close_session")

    def _check_calls(self, entry: _Entry | None, owner: Principal | None) -> None:
        quota = self.quotas.of(_name(owner))
        if entry is not None and quota.calls_per_session is not None and entry.calls >= quota.calls_per_session:
            raise ToolError(f"this session has run its {entry.calls} execute_python calls, the most allowed in one "
                            f"session ([mcp.quotas] calls_per_session = {quota.calls_per_session}); end it with "
                            "close_session and start a new one")
        if quota.calls_per_hour is None:
            return
        recent = self._calls.setdefault(owner, deque())
        now = time.monotonic()
        while recent and now - recent[0] >= HOUR:
            recent.popleft()
        if len(recent) >= quota.calls_per_hour:
            wait = HOUR - (now - recent[0])
            raise ToolError(f"{_who(owner)} has made {len(recent)} execute_python calls in the last hour, the most "
                            f"allowed ([mcp.quotas] calls_per_hour = {quota.calls_per_hour}); try again in "
                            f"{wait / 60:.0f} min")

    def _take_idle(self) -> list[Session]:
        """The sessions unused for ``idle_timeout`` and not running a call, out of the table (to be ended)."""
        now = time.monotonic()
        idle = [h for h, e in self._entries.items() if now - e.used > self.idle_timeout and not e.lock.locked()]
        return [self._entries.pop(handle).session for handle in idle]

    async def _end_each(self, sessions: list[Session]) -> None:
        for session in sessions:
            try:
                await self._end(session)
            except Exception:  # noqa: BLE001 - one session's failed shutdown must not stop the others' or a call
                _log.exception("closing an idle session failed")

    async def _sweep_idle(self) -> None:
        """An idle session's sandbox goes away on time, whether or not another call ever comes."""
        period = min(max(self.idle_timeout / 4, 0.25), 30.0)
        while True:
            await asyncio.sleep(period)
            await self._end_each(self._take_idle())

    async def close(self, handle: str, owner: Principal | None) -> None:
        self._owned(handle, owner)
        entry = self._entries.pop(handle)
        async with entry.lock:
            await self._end(entry.session)

    async def close_all(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            swept = await asyncio.gather(self._sweeper, return_exceptions=True)
            if isinstance(swept[0], Exception):  # it died before it was told to stop: said, not dropped
                _log.error("the idle-session sweeper had failed", exc_info=swept[0])
        # The pool first: each session ended below frees a slot, and a pool still open would start a sandbox (a
        # pod) in it, one this server then abandons mid-start as it exits.
        if self.pool is not None:
            try:
                await self.pool.close()
            except Exception:  # noqa: BLE001 - the clients' sessions below are ended whatever the pool did
                _log.exception("closing the pool of started sandboxes failed")
        entries, self._entries = list(self._entries.values()), {}
        ended = await asyncio.gather(*(self._end(e.session) for e in entries), return_exceptions=True)
        for failure in ended:  # every session is ended whatever one of them does; each failure is said
            if isinstance(failure, Exception):
                _log.error("closing a session failed", exc_info=failure)

    def notebook(self, handle: str, owner: Principal | None) -> Path:
        return self._owned(handle, owner).session.notebook_path


def _name(owner: Principal | None) -> str | None:
    return owner.name if owner else None


def _who(owner: Principal | None) -> str:
    return f"principal {owner.name!r}" if owner else "the unauthenticated clients (no [mcp.auth])"
