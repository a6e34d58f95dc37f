"""The pool's start tasks are owned: a failure none of them kept is raised, never dropped (issue 30, item 2).

Stand-in sessions (no sandbox): what is tested is the pool's own task keeping, which does not depend on what a
session starts.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cellgate.gate.session import pool as pool_module

pytestmark = pytest.mark.unit


class HeldSession:
    """Starts when the test lets it; its shutdown fails like a sandbox that cannot be deleted."""

    release: asyncio.Event
    starting: asyncio.Event

    def __init__(self, **options: Any) -> None:
        self.options = options

    async def start(self) -> HeldSession:
        HeldSession.starting.set()
        await HeldSession.release.wait()
        return self

    async def shutdown(self) -> None:
        raise OSError("the sandbox could not be deleted")


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> type[HeldSession]:
    monkeypatch.setattr(pool_module, "Session", HeldSession)
    return HeldSession


def test_a_session_the_closing_pool_cannot_shut_down_is_raised_by_close(held: type[HeldSession]) -> None:
    async def main() -> pool_module.Pool:
        held.release, held.starting = asyncio.Event(), asyncio.Event()
        pool = await pool_module.Pool(1).start()
        await asyncio.wait_for(held.starting.wait(), 10)  # the start is under way: close lets it end, then discards it
        held.release.set()  # it goes on only once close (which marks the pool closed before it waits) yields
        with pytest.raises(OSError, match="could not be deleted"):  # before: dropped by gather(return_exceptions)
            await pool.close()
        return pool

    assert not asyncio.run(main())._tasks  # every start's task is gone from the pool


def test_a_failure_no_start_kept_is_raised_by_wait_warm(held: type[HeldSession],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        held.release, held.starting = asyncio.Event(), asyncio.Event()
        held.release.set()
        pool = pool_module.Pool(1)

        async def broken_put(session: object) -> None:
            raise RuntimeError("the ready queue broke")

        monkeypatch.setattr(pool._ready, "put", broken_put)
        await pool.start()
        with pytest.raises(RuntimeError, match="ready queue broke"):  # before: wait_warm waited out its timeout
            await pool.wait_warm(timeout=10)

    asyncio.run(main())
