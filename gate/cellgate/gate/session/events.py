"""The relay's journal events, and the tasks it owns.

``RelayEvents`` journals what happens to a kernel and what it sends: hostile
or malformed input is bounded per kind (a flood cannot fill the disk), and a
journal that cannot be written never stops a cell from ending (its failure is
reported where it broke, and every call is refused from then on).
``Tasks`` owns every task the relay starts: the ones of the current kernel
(cancelled when it is detached) and the session's own.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine
from typing import Any

from cellgate.gate.audit.journal import JournalError
from cellgate.gate.audit.recorder import Recorder

# Journal entries about hostile input, per kind, before they are only counted.
PROTOCOL_EVENTS_PER_KIND = 50


class RelayEvents:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._protocol_counts: collections.Counter[str] = collections.Counter()

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

    def life(self, kind: str, **data: Any) -> None:
        """Journal an event of the kernel's life; a broken journal must not stop the cells from ending."""
        try:
            self.recorder.event(kind, **data)
        except JournalError:
            pass  # reported where it broke; every call is refused from then on

    def failure(self, exc: Exception) -> None:
        """The host itself failed (a bug, an unwritable journal): journalled if the journal still can be."""
        try:
            self.recorder.event("gate-error", error=f"{type(exc).__name__}: {exc}"[:500])
        except Exception:
            pass


class Tasks:
    """The relay's tasks: ``kernel`` ones end with the kernel they serve, the others with the session."""

    def __init__(self) -> None:
        self._session: set[asyncio.Task[Any]] = set()
        self._kernel: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], kernel: bool = False) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        group = self._kernel if kernel else self._session
        group.add(task)
        task.add_done_callback(group.discard)
        return task

    async def end_kernel(self) -> None:
        await _cancel(self._kernel)

    async def end_session(self) -> None:
        await _cancel(self._session)


async def _cancel(group: set[asyncio.Task[Any]]) -> None:
    for task in list(group):
        task.cancel()
    await asyncio.gather(*group, return_exceptions=True)
