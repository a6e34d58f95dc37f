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
from collections import deque
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


class Sessions:
    """Sandboxed sessions by handle."""

    def __init__(self, options: dict[str, Any], single_client: bool, max_sessions: int, idle_timeout: float,
                 pool_size: int = 0, quotas: McpQuotas | None = None) -> None:
        self.options = options
        self.pool_size = pool_size
        self.pool: Pool | None = None
        self.single_client = single_client
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.quotas = quotas or McpQuotas()
        self._entries: dict[str, _Entry] = {}
        self._calls: dict[Principal | None, deque[float]] = {}  # when each principal's calls of the last hour began
        self._default: str | None = None
        self._lock = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start closing idle sessions on a timer; with ``[sandbox] pool = N``, start N sandboxes now, so a new
        session does not wait for one."""
        self._sweeper = asyncio.create_task(self._sweep_idle())
        if self.pool_size:
            self.pool = Pool(self.pool_size, max_sessions=self.max_sessions,
                             **self.options, metadata={"pool": {"size": self.pool_size}})
            await self.pool.start()

    async def _new_session(self, owner: Principal | None) -> Session:
        session = await self.pool.acquire() if self.pool is not None else await Session(**self.options).start()
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
        async with self._lock:
            await self._close_idle()
            if handle is None and self.single_client and self._default in self._entries:
                handle = self._default
            if handle is not None:
                entry = self._owned(handle, owner)
                self._check_calls(entry, owner)
            else:
                self._check_calls(None, owner)
                self._check_sessions(owner)
                session = await self._new_session(owner)
                handle = secrets.token_urlsafe(16)
                entry = self._entries[handle] = _Entry(session, owner)
                if self.single_client:
                    self._default = handle
            entry.used = time.monotonic()
            entry.calls += 1
            if self.quotas.of(_name(owner)).calls_per_hour is not None:
                self._calls.setdefault(owner, deque()).append(entry.used)
            return handle, entry

    def _check_sessions(self, owner: Principal | None) -> None:
        if len(self._entries) >= self.max_sessions:
            raise ToolError(f"this server already runs {len(self._entries)} sessions (--max-sessions "
                            f"{self.max_sessions}); close one with close_session, or try again later")
        limit = self.quotas.of(_name(owner)).sessions
        mine = sum(1 for e in self._entries.values() if e.owner == owner)
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

    async def _close_idle(self) -> None:
        now = time.monotonic()
        for handle in [h for h, e in self._entries.items() if now - e.used > self.idle_timeout and not e.lock.locked()]:
            await self._end(self._entries.pop(handle).session)

    async def _sweep_idle(self) -> None:
        """An idle session's sandbox goes away on time, whether or not another call ever comes."""
        period = min(max(self.idle_timeout / 4, 0.25), 30.0)
        while True:
            await asyncio.sleep(period)
            try:
                async with self._lock:
                    await self._close_idle()
            except Exception:  # noqa: BLE001 - one session's failed shutdown must not stop the sweeping
                _log.exception("closing an idle session failed")

    async def close(self, handle: str, owner: Principal | None) -> None:
        async with self._lock:
            self._owned(handle, owner)
            entry = self._entries.pop(handle)
        async with entry.lock:
            await self._end(entry.session)

    async def close_all(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        # The pool first: each session ended below frees a slot, and a pool still open would start a sandbox (a
        # pod) in it, one this server then abandons mid-start as it exits.
        if self.pool is not None:
            await self.pool.close()
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(self._end(e.session) for e in entries), return_exceptions=True)

    def notebook(self, handle: str, owner: Principal | None) -> Path:
        return self._owned(handle, owner).session.notebook_path


def _name(owner: Principal | None) -> str | None:
    return owner.name if owner else None


def _who(owner: Principal | None) -> str:
    return f"principal {owner.name!r}" if owner else "the unauthenticated clients (no [mcp.auth])"
