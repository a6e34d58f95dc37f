"""The sandboxed sessions of ``cellgate mcp serve``, by handle, each owned by the principal that started it.

A handle is a 128-bit random capability, and with ``[mcp.auth]`` it is only
good in its owner's hands: another principal presenting it gets the very
error an unknown handle gets (``unknown``), so it learns nothing, not even
that the handle exists. ``[mcp.quotas]`` bounds each principal: sessions open
at once (paused ones included), ``execute_python`` calls per session and per
hour; one principal reaching a limit leaves the others as they were. A
session's calls are counted in its lineage's ledger (``calls.lineage``), so
``calls_per_session`` holds across the sessions ``fork`` makes and a restart.

Live sessions (``parked``): a session unused for ``[mcp] idle_pause`` seconds, and every session when the server
stops (``[mcp] pause_on_stop``), is paused into a checkpoint and its sandbox freed; the next call with its handle,
in this process or a restarted server's, resumes it (same notebook, variables as they were) for its owner only.
``fork`` continues one session's kernel in new sessions of the same owner. Only a backend that can checkpoint
(local gVisor, as root) pauses; elsewhere a session is ended as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from cellgate.gate import CellgateError, ConfigError, Pool, Session
from cellgate.gate.ext import BudgetRefused, lineage_of, read_checkpoint

from .auth import Principal
from .config import McpQuotas
from .parked import Owner, Parked, Parking

HOUR = 3600.0
PRINCIPAL_EVENT = "mcp-principal"  # journal event: who owns the session (rendered by events.render_principal)
MOVE_BOUND = 300.0  # seconds a call waits for its session's pause (checkpoint ~4 s) or resume to end
CALLS = "mcp.execute_python"  # the name [mcp.quotas] calls_per_session counts in a lineage's ledger
MAX_FORKS = 16  # sessions one fork_session call makes, at most (each a sandbox; the quotas bound it further)

_log = logging.getLogger(__name__)


@dataclass
class _Entry:
    session: Session
    owner: Principal | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)
    calls: int = 0
    pooled: bool = False  # its sandbox came from the warm pool, whose slot it gives back
    pausable: bool = True  # False once its backend refused a checkpoint: it is ended when idle, as before


class _Unknown(ToolError):
    """No session of the caller's by that handle (``Sessions.unknown``)."""


Opener = Callable[[Principal | None], Awaitable[Session]]  # a started session for a principal (before it is claimed)


class Sessions:
    """Sandboxed sessions by handle.

    No lock is held across a sandbox start or end: every check of a quota and the count it checks happen in one
    step of the event loop (nothing between them awaits), and a session being started holds its place in the
    counts (``_starting``) from before its start to its entry, or gives it back when the start fails. So one
    principal's slow start never stalls another principal's calls, and the quotas are exact under concurrency.
    A session being paused is out of the table (``_pausing``) and one being resumed in ``_resuming``: a call for
    it waits for that to end, then finds it live or parked.
    """

    def __init__(self, options: dict[str, Any], single_client: bool, max_sessions: int, idle_timeout: float,
                 pool_size: int = 0, quotas: McpQuotas | None = None, opener: Opener | None = None,
                 parking: Parking | None = None, idle_pause: float = 0.0, pause_on_stop: bool = False) -> None:
        """``opener`` starts a session for a principal (a test's hook); by default a warm pool's or a new one.
        ``parking``: where paused sessions are kept (none: sessions are never paused)."""
        self.options = options
        self.pool_size = pool_size
        self.pool: Pool | None = None
        self.single_client = single_client
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.quotas = quotas or McpQuotas()
        self.parking = parking
        self.idle_pause = idle_pause if parking is not None else 0.0
        self.pause_on_stop = pause_on_stop and parking is not None
        self._opener = opener or self._open_sandbox
        self._entries: dict[str, _Entry] = {}
        self._starting: Counter[Principal | None] = Counter()  # sessions being started or resumed, by owner
        self._calls: dict[Principal | None, deque[float]] = {}  # when each principal's calls of the last hour began
        self._pausing: dict[str, tuple[Principal | None, asyncio.Event]] = {}  # set when the pause has ended
        self._resuming: dict[str, tuple[Principal | None, asyncio.Task[_Entry]]] = {}
        self._default: str | None = None
        self._one_client = asyncio.Lock()  # stdio: the client's calls without a handle share its one session
        self._closed = False
        self._sweeper: asyncio.Task[None] | None = None
        self._sweeping: asyncio.Future[None] | None = None  # the sweep under way (a pause is never cut short)

    async def start(self) -> None:
        """Start closing (or pausing) idle sessions on a timer, after dropping the paused sessions that expired
        while no server ran; with ``[sandbox] pool = N``, start N sandboxes now, so a new session does not wait."""
        if self.parking is not None:
            self.parking.expire(self.idle_timeout)
        self._sweeper = asyncio.create_task(self._sweep_idle())
        if self.pool_size:
            self.pool = Pool(self.pool_size, max_sessions=self.max_sessions,
                             **self.options, metadata={"pool": {"size": self.pool_size}})
            await self.pool.start()

    async def _open_sandbox(self, owner: Principal | None) -> Session:
        return await self.pool.acquire() if self.pool is not None else await Session(**self.options).start()

    async def _new_session(self, owner: Principal | None, opened: Session | None = None) -> Session:
        session = opened or await self._opener(owner)
        if owner is not None:  # a pooled sandbox started before anyone asked: its owner is set when claimed
            session.claim(owner.name)
            session.recorder.event(PRINCIPAL_EVENT, sync=True, principal=owner.record())
            session.recorder.write_notebook()
        return session

    async def _end(self, entry: _Entry) -> None:
        if entry.pooled and self.pool is not None:
            await self.pool.release(entry.session)
        else:
            await entry.session.shutdown()

    def unknown(self, handle: str) -> ToolError:
        """The one refusal for a handle that is not the caller's: closed, timed out, never made, or another's."""
        return _Unknown(f"no session {handle[:80]!r} on this server (it was closed, timed out after "
                        f"{self.idle_timeout:g} s idle, or never existed); call execute_python without "
                        "`session` to start a new one")

    async def _live(self, handle: str, owner: Principal | None) -> _Entry:
        """The caller's session ``handle`` with its sandbox running: resumed first if it is paused."""
        pausing = self._pausing.get(handle)
        if pausing is not None and pausing[0] == owner:
            async with asyncio.timeout(MOVE_BOUND):
                await pausing[1].wait()
        entry = self._entries.get(handle)
        if entry is not None:
            if entry.owner != owner:
                raise self.unknown(handle)
            return entry
        resuming = self._resuming.get(handle)
        if resuming is None:
            resuming = (owner, self._unpark(handle, owner))
        if resuming[0] != owner:
            raise self.unknown(handle)
        async with asyncio.timeout(MOVE_BOUND):
            return await asyncio.shield(resuming[1])  # a caller that goes away leaves the resume to end

    def _unpark(self, handle: str, owner: Principal | None) -> asyncio.Task[_Entry]:
        """Take the caller's paused session out of the parking (or refuse it as unknown) and resume it."""
        if self.parking is None or self._closed:
            raise self.unknown(handle)
        with _state_file():
            parked = self.parking.take(handle, owner)
        if parked is None:
            raise self.unknown(handle)
        try:
            self._check_sandboxes()
        except ToolError:
            self.parking.park(handle, parked)  # still paused, for a later call
            raise
        self._starting[owner] += 1
        task = asyncio.create_task(self._resume(handle, parked, owner))
        self._resuming[handle] = (owner, task)
        task.add_done_callback(lambda done: self._resumed(handle, owner, done))  # bookkeeping: callers await it
        return task

    def _resumed(self, handle: str, owner: Principal | None, task: asyncio.Task[_Entry]) -> None:
        self._resuming.pop(handle, None)
        self._given_back(owner, 1)
        if not task.cancelled():
            task.exception()  # its callers were told; a caller that went away leaves nothing unretrieved

    async def _resume(self, handle: str, parked: Parked, owner: Principal | None) -> _Entry:
        assert self.parking is not None
        folder = self.parking.checkpoint_of(parked)
        try:
            checkpoint = await asyncio.to_thread(read_checkpoint, folder)
            if checkpoint.digest != parked.manifest:  # another session's checkpoint, under this one's folder name
                _log.error("the checkpoint folder %s is not the one session %s was paused into (its manifest's "
                           "digest is %s, not %s): the state folder was altered; it is not resumed", folder,
                           handle[:80], checkpoint.digest, parked.manifest)
                raise ToolError(f"session {handle[:80]!r} was paused and cannot be resumed: its checkpoint is not "
                                "the one it was paused into; its variables are lost (its audit notebook stays): call "
                                "execute_python without `session` to start a new one")
            session = Session.resume(folder, **self.options)
            await session.start()
        except ToolError:
            raise
        except ConfigError as exc:  # this server runs with other tools, policy or sandbox settings: kept for them
            self.parking.park(handle, parked)
            raise ToolError(f"session {handle[:80]!r} is paused and cannot be resumed by this server: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - whatever failed, the client is told, and the checkpoint is spent
            self.parking.discard(parked)
            _log.exception("resuming a paused session failed")
            raise ToolError(f"session {handle[:80]!r} was paused and could not be resumed ({exc}); its variables are "
                            "lost (its audit notebook stays): call execute_python without `session` to start a new "
                            "one") from None
        self.parking.discard(parked)  # restored: its sandbox no longer reads the checkpoint
        if owner is not None:
            session.claim(owner.name)
        # Who resumed it, and from which checkpoint: the record says it whoever the principal (None: no [mcp.auth]).
        session.recorder.event(PRINCIPAL_EVENT, sync=True, principal=None if owner is None else owner.record(),
                               resumed=checkpoint.id)
        session.recorder.write_notebook()
        entry = _Entry(session, owner, calls=parked.calls)
        try:  # its calls are its lineage's, named in its checkpoint; at least what its parking says
            lineage = lineage_of(session)
            await asyncio.to_thread(lineage.raise_to, {CALLS: parked.calls})
            entry.calls = (await asyncio.to_thread(lineage.held)).get(CALLS, parked.calls)
        except (OSError, ValueError):
            _log.exception("a resumed session's call count could not be read from its lineage's ledger")
        self._entries[handle] = entry
        return entry

    async def admit(self, handle: str | None, owner: Principal | None) -> tuple[str, _Entry]:
        """The session one ``execute_python`` call runs in (a new one without a handle), within the quotas; its
        sandbox is running (a paused session is resumed first)."""
        await self._end_each(self._take_idle())  # their places are free now; only this call waits for the ends
        if handle is None and self.single_client:
            async with self._one_client:
                if not await self._has(self._default, owner):
                    self._default = await self._open(owner)
                    return self._default, self._entries[self._default]
            handle = self._default
        if handle is None:
            handle = await self._open(owner)
            return handle, self._entries[handle]
        entry = await self._live(handle, owner)
        self._check_calls(owner)
        self._count_call(entry, owner)
        return handle, entry

    async def _has(self, handle: str | None, owner: Principal | None) -> bool:
        """Whether ``handle`` is the caller's (live, or paused and now resumed)."""
        if handle is None:
            return False
        try:
            await self._live(handle, owner)
        except _Unknown:
            return False
        return True

    async def _open(self, owner: Principal | None) -> str:
        """A new session of ``owner``, its first call counted: its place and the call are taken before the start
        (so concurrent admissions count them) and given back if the start fails."""
        self._check_calls(owner)
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
            self._given_back(owner, 1)
        entry = _Entry(session, owner, pooled=self.pool is not None)
        try:  # its first call, in its lineage's ledger (a new lineage: never refused)
            entry.calls = self._take_call(entry, None)
        except ToolError:
            if began is not None:
                self._calls[owner].remove(began)
            await self._end(entry)
            raise
        if self._closed:  # the server stopped while it started
            await self._end(entry)
            raise ToolError("this server is stopping; no new session was started")
        handle = secrets.token_urlsafe(16)
        self._entries[handle] = entry
        return handle

    def _given_back(self, owner: Principal | None, count: int) -> None:
        self._starting[owner] -= count
        if not self._starting[owner]:
            del self._starting[owner]

    async def fork(self, handle: str, owner: Principal | None, count: int) -> list[str]:
        """``count`` new sessions of ``owner``, each continuing session ``handle``'s kernel as it is now (its
        variables) in a sandbox of its own; the session goes on. Their places count against the quotas."""
        if not 1 <= count <= MAX_FORKS:
            raise ToolError(f"count {count} is not between 1 and {MAX_FORKS}; fork into fewer sessions")
        entry = await self._live(handle, owner)
        self._check_sessions(owner, count)
        self._starting[owner] += count
        try:
            async with entry.lock:
                folder = self.parking.new_checkpoint() if self.parking is not None else None
                try:
                    forks = await entry.session.fork(count, folder)
                except CellgateError as exc:  # the backend cannot checkpoint, the kernel is stopped, ...
                    raise ToolError(f"session {handle[:80]!r} was not forked: {exc}") from None
                finally:
                    if folder is not None:  # the forks are restored (or failed): their sandboxes no longer read it
                        shutil.rmtree(folder, ignore_errors=True)
            entry.used = time.monotonic()
        finally:
            self._given_back(owner, count)
        entries = [_Entry(await self._new_session(owner, forked), owner) for forked in forks]
        if self._closed:
            await asyncio.gather(*(self._end(e) for e in entries), return_exceptions=True)
            raise ToolError("this server is stopping; the forks were ended")
        handles = [secrets.token_urlsafe(16) for _ in entries]
        self._entries.update(zip(handles, entries, strict=True))
        return handles

    def _count_call(self, entry: _Entry | None, owner: Principal | None) -> float | None:
        """Count one call (in ``entry``'s lineage, refused when its ``calls_per_session`` is used up; and in the
        hour when a limit wants it); the hour's stamp, if kept."""
        quota = self.quotas.of(_name(owner))
        if entry is not None:
            entry.calls = self._take_call(entry, quota.calls_per_session)
        now = time.monotonic()
        if entry is not None:
            entry.used = now
        if quota.calls_per_hour is None:
            return None
        self._calls.setdefault(owner, deque()).append(now)
        return now

    def _running(self) -> int:
        """Sandboxes running or being started, resumed or paused (each holds one until it is done)."""
        return len(self._entries) + sum(self._starting.values()) + len(self._pausing)

    def _check_sandboxes(self, more: int = 1) -> None:
        running = self._running()
        if running + more > self.max_sessions:
            raise ToolError(f"this server already runs or starts {running} sessions (--max-sessions "
                            f"{self.max_sessions}); close one with close_session, or try again later")

    def _check_sessions(self, owner: Principal | None, more: int = 1) -> None:
        self._check_sandboxes(more)
        limit = self.quotas.of(_name(owner)).sessions
        if limit is None:
            return
        with _state_file():
            paused = self.parking.count(owner) if self.parking is not None else 0
        mine = (sum(1 for e in self._entries.values() if e.owner == owner) + self._starting[owner]
                + sum(1 for who, _ in self._pausing.values() if who == owner) + paused)
        if mine + more > limit:
            asked = "" if more == 1 else f" and {more} more were asked for"
            raise ToolError(f"{_who(owner)} already has {mine} sessions open{asked}, the most allowed ([mcp.quotas] "
                            f"sessions = {limit}, paused ones included); pass the `session` of one of them, or end "
                            "one with close_session")

    def _take_call(self, entry: _Entry, limit: int | None) -> int:
        """Count one call of ``entry``'s session in its lineage's ledger (``calls.lineage``: the session, the
        sessions ``fork_session`` made from it or it from, and the same sessions resumed by a restarted server all
        draw on one ``calls_per_session``), checked and counted in one locked step; its lineage's count."""
        try:
            return lineage_of(entry.session).take(CALLS, limit, "[mcp.quotas] calls_per_session")
        except BudgetRefused as exc:
            raise ToolError(f"this session and the sessions forked from it or it from have run {exc.count} "
                            "execute_python calls, the most allowed in one session "
                            f"([mcp.quotas] calls_per_session = {limit}); end it with close_session and start a new "
                            "one") from None
        except (OSError, ValueError) as exc:  # the ledger cannot be read or written: nothing is run uncounted
            raise ToolError(f"the call was not run: this session's call count cannot be kept ({exc})") from None

    def _check_calls(self, owner: Principal | None) -> None:
        quota = self.quotas.of(_name(owner))
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

    def _idle(self, entry: _Entry, after: float) -> bool:
        return time.monotonic() - entry.used > after and not entry.lock.locked()

    def _take_idle(self) -> list[_Entry]:
        """The sessions unused for ``idle_timeout`` and not running a call, out of the table (to be ended)."""
        idle = [h for h, e in self._entries.items() if self._idle(e, self.idle_timeout)]
        return [self._entries.pop(handle) for handle in idle]

    async def _end_each(self, entries: list[_Entry]) -> None:
        for entry in entries:
            try:
                await self._end(entry)
            except Exception:  # noqa: BLE001 - one session's failed shutdown must not stop the others' or a call
                _log.exception("closing an idle session failed")

    async def _pause(self, handle: str, entry: _Entry) -> bool:
        """Checkpoint the session (out of the table) into the parking and free its sandbox; False, and the
        session as it was, when its backend cannot (or a cell runs)."""
        assert self.parking is not None
        try:
            pausable = entry.session.can_checkpoint
        except CellgateError:  # no kernel (it died): ended when idle, as before
            pausable = False
        if not pausable:
            entry.pausable = False
            return False
        folder = self.parking.new_checkpoint()
        done = asyncio.Event()
        self._pausing[handle] = (entry.owner, done)
        try:
            try:
                await entry.session.checkpoint(folder)
            except CellgateError as exc:  # a cell runs, or the checkpoint failed: tried again when idle again
                shutil.rmtree(folder, ignore_errors=True)
                _log.warning("a session was not paused this time: %s", exc)
                return False
            if entry.pooled and self.pool is not None:
                await self.pool.release(entry.session)  # its sandbox has stopped: the pool's slot is free
            try:  # what its entry is bound to (checked at resume)
                manifest = (await asyncio.to_thread(read_checkpoint, folder)).digest
            except CellgateError:  # its sandbox is stopped, its checkpoint unreadable: the session has ended
                shutil.rmtree(folder, ignore_errors=True)
                _log.exception("a paused session's checkpoint could not be read back; the session has ended")
                return True
            owner = None if entry.owner is None else Owner(name=entry.owner.name, issuer=entry.owner.issuer)
            used = time.time() - (time.monotonic() - entry.used)
            self.parking.park(handle, Parked(checkpoint=folder.name, manifest=manifest, owner=owner, used=used,
                                            calls=entry.calls))
            return True
        finally:
            del self._pausing[handle]
            done.set()

    async def _pause_idle(self) -> None:
        """Pause the sessions unused for ``idle_pause`` seconds, one at a time."""
        for handle in [h for h, e in self._entries.items() if e.pausable and self._idle(e, self.idle_pause)]:
            entry = self._entries.get(handle)
            if entry is None or not self._idle(entry, self.idle_pause):
                continue  # used (or ended) since
            del self._entries[handle]  # out of the table at once: a call for it waits for the pause, then resumes
            async with entry.lock:
                if not await self._pause(handle, entry):
                    self._entries[handle] = entry

    async def _sweep_once(self) -> None:
        await self._end_each(self._take_idle())
        try:
            if self.idle_pause:
                await self._pause_idle()
            if self.parking is not None:
                expired = await asyncio.to_thread(self.parking.expire, self.idle_timeout)
                if expired:
                    _log.info("%d paused sessions unused for %g s were dropped", expired, self.idle_timeout)
        except ConfigError as exc:  # parked.json refused: said, and the sweeper goes on (idle sessions still end)
            _log.error("%s", exc)

    async def _sweep_idle(self) -> None:
        """An idle session's sandbox goes away (paused, or ended) on time, whether or not another call ever comes."""
        soonest = min(self.idle_timeout, self.idle_pause or self.idle_timeout)
        period = min(max(soonest / 4, 0.25), 30.0)
        while True:
            await asyncio.sleep(period)
            self._sweeping = asyncio.ensure_future(self._sweep_once())
            await asyncio.shield(self._sweeping)  # close_all waits for a pause under way rather than cut it short

    async def close(self, handle: str, owner: Principal | None) -> None:
        """End the caller's session, live or paused (a paused one's record ends as it was paused)."""
        entry = self._entries.get(handle)
        if entry is None and self.parking is not None and handle not in self._resuming:
            pausing = self._pausing.get(handle)
            if pausing is not None and pausing[0] == owner:
                async with asyncio.timeout(MOVE_BOUND):
                    await pausing[1].wait()
            with _state_file():
                parked = self.parking.take(handle, owner)
            if parked is not None:
                self.parking.discard(parked)
                return
        entry = await self._live(handle, owner)
        self._entries.pop(handle, None)
        async with entry.lock:
            await self._end(entry)

    async def _stop_one(self, entry: _Entry, handle: str) -> None:
        """At the server's stop: paused (``pause_on_stop``, when its backend can) or ended."""
        if self.pause_on_stop and entry.pausable and await self._pause(handle, entry):
            return
        await self._end(entry)

    async def close_all(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            swept = await asyncio.gather(self._sweeper, return_exceptions=True)
            if isinstance(swept[0], Exception):  # it died before it was told to stop: said, not dropped
                _log.error("the idle-session sweeper had failed", exc_info=swept[0])
        if self._sweeping is not None:
            await asyncio.gather(self._sweeping, return_exceptions=True)  # a pause under way ends
        await asyncio.gather(*(task for _, task in list(self._resuming.values())), return_exceptions=True)
        # The pool first: each session ended below frees a slot, and a pool still open would start a sandbox (a
        # pod) in it, one this server then abandons mid-start as it exits.
        if self.pool is not None:
            try:
                await self.pool.close()
            except Exception:  # noqa: BLE001 - the clients' sessions below are ended whatever the pool did
                _log.exception("closing the pool of started sandboxes failed")
        entries, self._entries = list(self._entries.items()), {}
        ended = await asyncio.gather(*(self._stop_one(e, h) for h, e in entries), return_exceptions=True)
        for failure in ended:  # every session is paused or ended whatever one of them does; each failure is said
            if isinstance(failure, Exception):
                _log.error("closing a session failed", exc_info=failure)

    async def notebook(self, handle: str, owner: Principal | None) -> Path:
        return (await self._live(handle, owner)).session.notebook_path


@contextlib.contextmanager
def _state_file() -> Iterator[None]:
    """A refused ``parked.json`` (``Parking``'s ConfigError) as the caller's tool error, and in the server's log."""
    try:
        yield
    except ConfigError as exc:
        _log.error("%s", exc)
        raise ToolError(f"this server's paused sessions cannot be used: {exc}") from None


def _name(owner: Principal | None) -> str | None:
    return owner.name if owner else None


def _who(owner: Principal | None) -> str:
    return f"principal {owner.name!r}" if owner else "the unauthenticated clients (no [mcp.auth])"
