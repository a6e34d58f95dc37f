"""The session's journal events, and the task group that owns its tasks.

``RelayEvents`` journals what happens to a kernel and what it sends: hostile
or malformed input is bounded per kind (a flood cannot fill the disk), and a
journal that cannot be written never stops a cell from ending (its failure is
reported where it broke, and every call is refused from then on): every
journal write of the relay goes through ``write``, and limits are enforced
before they are journalled.
``Tasks`` owns every task the relay starts, as a task group does: the ones of
the current kernel (cancelled when it is detached) and the session's own. A
task that fails (anything but being cancelled) is never dropped: its siblings
are cancelled and the owner's ``on_failure`` ends the session, with the reason.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from cellgate.gate.audit.journal import JournalError
from cellgate.gate.audit.recorder import Recorder

# Journal entries about hostile input, per kind, before they are only counted.
PROTOCOL_EVENTS_PER_KIND = 50

log = logging.getLogger("cellgate.gate")


class RelayEvents:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._protocol_counts: collections.Counter[str] = collections.Counter()
        self._journal_broken = False

    def protocol(self, kind: str, **data: Any) -> None:
        """Journal hostile or malformed input, bounded per kind so a flood cannot fill the disk."""
        self._protocol_counts[kind] += 1
        count = self._protocol_counts[kind]
        try:
            if count <= PROTOCOL_EVENTS_PER_KIND:
                self.recorder.event(kind, **data)
            elif count in (PROTOCOL_EVENTS_PER_KIND + 1, 1000, 100_000):
                self.recorder.event("protocol-events-suppressed", kind=kind, count=count,
                                    note=f"further {kind} events are counted, not journalled one by one")
        except JournalError:
            pass  # a journal that cannot be written refuses every call; its failure is reported where it broke

    def protocol_counts(self) -> dict[str, int]:
        """How many hostile or malformed inputs of each kind this session has seen."""
        return dict(self._protocol_counts)

    def write(self, write: Callable[[], object]) -> bool:
        """Run one journal write of the relay; False if the journal cannot be written. Its failure is never
        raised into what called it (a cell's clock, a pump): the journal refuses every call from then on, and
        the host's log says so once, as the journal itself cannot."""
        try:
            write()
        except JournalError as exc:
            if not self._journal_broken:
                self._journal_broken = True
                log.error("cellgate: %s; cells still end and their limits are still enforced, unrecorded", exc)
            return False
        return True

    def life(self, kind: str, **data: Any) -> None:
        """Journal an event of the kernel's life; a broken journal must not stop the cells from ending."""
        self.write(lambda: self.recorder.event(kind, **data))

    def failure(self, exc: BaseException, **data: Any) -> None:
        """The host itself failed (a bug, an unwritable journal): journalled if the journal still can be,
        else in the host's log."""
        error = f"{type(exc).__name__}: {exc}"[:500]
        try:
            self.recorder.event("gate-error", error=error, **data)
        except Exception:
            log.error("cellgate: the host failed (%s) and its journal could not record it: %s", data, error)


# Told which task failed (its name) and how; a coroutine, run as a task of the session.
OnFailure = Callable[[str, BaseException], Coroutine[Any, Any, None]]


class Tasks:
    """The relay's tasks, owned as a task group owns its children: ``kernel`` ones end with the kernel they
    serve, the others with the session. The first child that fails cancels every sibling and runs
    ``on_failure`` (the relay ends the session with the reason); ``failure`` says which and how."""

    def __init__(self, on_failure: OnFailure | None = None) -> None:
        self._session: set[asyncio.Task[Any]] = set()
        self._kernel: set[asyncio.Task[Any]] = set()
        self.on_failure = on_failure
        self.failure: str | None = None

    def spawn(self, coro: Coroutine[Any, Any, Any], kernel: bool = False, name: str | None = None) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name or getattr(coro, "__qualname__", None))
        (self._kernel if kernel else self._session).add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._kernel.discard(task)
        self._session.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        if self.failure is not None:  # a later failure (its siblings were cancelled): logged, never lost
            log.error("cellgate: relay task %s also failed: %s: %s", task.get_name(), type(exc).__name__, exc)
            return
        self.failure = f"the relay's task {task.get_name()} failed: {type(exc).__name__}: {exc}"[:500]
        for sibling in [*self._kernel, *self._session]:
            sibling.cancel()
        if self.on_failure is not None:
            self.spawn(self.on_failure(task.get_name(), exc))

    async def end_kernel(self) -> None:
        await _cancel(self._kernel)

    async def end_session(self) -> None:
        await _cancel(self._session)


async def _cancel(group: set[asyncio.Task[Any]]) -> None:
    for task in list(group):
        task.cancel()
    await asyncio.gather(*group, return_exceptions=True)  # each one's failure was seen by Tasks._done
