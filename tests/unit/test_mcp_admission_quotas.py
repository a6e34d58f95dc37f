"""Admission to `cellgate mcp serve`'s sessions under concurrency (extensions/mcp/sessions.py): no lock is held
across a sandbox start, and the quotas stay exact while starts are under way. Starts are held by the test (a gated
opener) and released when it says, so every interleaving here is one the event loop takes deterministically;
sessions are stand-ins (what is counted does not depend on them). With real sandboxes:
tests/sandbox/test_mcp_admission.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from cellgate.extensions.mcp.auth import STATIC, Principal
from cellgate.extensions.mcp.config import McpQuotas
from cellgate.extensions.mcp.sessions import Sessions
from cellgate.gate.ext import Lineage

T = TypeVar("T")
ALICE, BOB, CAROL = (Principal(name, STATIC) for name in ("alice", "bob", "carol"))


class StandIn:
    """What Sessions asks of a session it admits: claim it, record its owner, end it."""

    class recorder:  # noqa: N801 - the attribute's name
        @staticmethod
        def event(*args: Any, **kwargs: Any) -> None:
            pass

        @staticmethod
        def write_notebook() -> None:
            pass

    def __init__(self, owner: Principal | None) -> None:
        self.owner, self.ended = owner, False
        # the ledger its calls are counted in ([mcp.quotas] calls_per_session holds across its lineage)
        self.provisioner = SimpleNamespace(gate=SimpleNamespace(lineage=Lineage.new()))

    def claim(self, name: str) -> None:
        assert self.owner is not None and name == self.owner.name

    async def shutdown(self) -> None:
        self.ended = True


class Held:
    """An opener whose starts wait until released; ``entered`` is who began a start, in order."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.release = asyncio.Event()
        self.fail = False  # the released starts raise instead
        self._changed = asyncio.Condition()

    async def __call__(self, owner: Principal | None) -> StandIn:
        async with self._changed:
            self.entered.append(owner.name if owner else "anyone")
            self._changed.notify_all()
        await self.release.wait()
        if self.fail:
            raise RuntimeError("the sandbox did not start")
        return StandIn(owner)

    async def until(self, count: int) -> None:
        async with self._changed:
            await bounded(self._changed.wait_for(lambda: len(self.entered) >= count))


async def bounded(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, 30)


def sessions(held: Held, max_sessions: int = 8, single_client: bool = False, **quotas: Any) -> Sessions:
    return Sessions({}, single_client, max_sessions, idle_timeout=3600, quotas=McpQuotas(**quotas),
                    opener=held)  # type: ignore[arg-type]  # stand-ins, not Sessions


async def refusal(admitting: asyncio.Task[Any]) -> str:
    await asyncio.wait({admitting}, timeout=30)
    assert admitting.done(), "this admission was not refused: it is waiting in a start"
    with pytest.raises(ToolError) as info:
        admitting.result()
    return str(info.value)


def test_the_session_quota_and_the_server_cap_count_the_starts_under_way() -> None:
    async def scenario() -> None:
        held = Held()
        table = sessions(held, max_sessions=3, sessions=2)
        alice = [asyncio.create_task(table.admit(None, ALICE)) for _ in range(3)]
        await held.until(2)
        bob = [asyncio.create_task(table.admit(None, BOB)) for _ in range(2)]
        await held.until(3)
        # Three starts under way, none finished: Alice's third and Bob's second are refused by them.
        assert "principal 'alice' already has 2 sessions open" in await refusal(alice[2])
        assert "already runs or starts 3 sessions (--max-sessions 3)" in await refusal(bob[1])
        assert held.entered == ["alice", "alice", "bob"]
        held.release.set()
        handles = [handle for handle, _ in await bounded(asyncio.gather(alice[0], alice[1], bob[0]))]
        assert len(set(handles)) == 3
        assert "already runs or starts 3 sessions" in await refusal(asyncio.create_task(table.admit(None, CAROL)))

    asyncio.run(scenario())


def test_the_hourly_quota_counts_a_start_under_way_and_a_failed_start_gives_its_call_back() -> None:
    async def scenario() -> None:
        held = Held()
        table = sessions(held, calls_per_hour=2)
        held.release.set()
        handle, _ = await bounded(table.admit(None, CAROL))  # call 1
        held.release.clear()
        starting = asyncio.create_task(table.admit(None, CAROL))  # call 2, its start held
        await held.until(2)
        assert "has made 2 execute_python calls in the last hour" in await refusal(
            asyncio.create_task(table.admit(handle, CAROL)))
        held.fail = True
        held.release.set()
        with pytest.raises(RuntimeError, match="did not start"):
            await bounded(starting)
        await bounded(table.admit(handle, CAROL))  # the failed start's call was given back: this is call 2
        assert "has made 2 execute_python calls" in await refusal(asyncio.create_task(table.admit(handle, CAROL)))

    asyncio.run(scenario())


def test_calls_of_other_principals_go_on_while_one_principals_start_is_held() -> None:
    async def scenario() -> None:
        held = Held()
        table = sessions(held)
        held.release.set()
        alice_handle, _ = await bounded(table.admit(None, ALICE))
        held.release.clear()
        carol = asyncio.create_task(table.admit(None, CAROL))
        await held.until(2)
        again, _ = await bounded(table.admit(alice_handle, ALICE))  # would wait for Carol's start under one lock
        bob = asyncio.create_task(table.admit(None, BOB))
        await held.until(3)  # Bob's start began while Carol's is still held
        assert again == alice_handle and not carol.done()
        held.release.set()
        await bounded(asyncio.gather(carol, bob))
        assert held.entered == ["alice", "carol", "bob"]

    asyncio.run(scenario())


def test_one_client_over_stdio_gets_one_session_from_concurrent_first_calls() -> None:
    async def scenario() -> None:
        held = Held()
        table = sessions(held, single_client=True)
        first = [asyncio.create_task(table.admit(None, None)) for _ in range(3)]
        await held.until(1)
        held.release.set()
        handles = {handle for handle, _ in await bounded(asyncio.gather(*first))}
        assert len(handles) == 1 and held.entered == ["anyone"]

    asyncio.run(scenario())


def test_close_all_ends_every_clients_session_when_the_pool_fails_to_close() -> None:
    class FailingPool:
        """A pool whose close fails (a started sandbox it could not delete); it ends the sessions handed back."""

        async def close(self) -> None:
            raise OSError("a pod could not be deleted")

        async def release(self, session: StandIn) -> None:
            await session.shutdown()

    async def main() -> list[StandIn]:
        held = Held()
        held.release.set()
        served = sessions(held)
        opened = [(await bounded(served.admit(None, owner)))[1].session for owner in (ALICE, BOB)]
        served.pool = FailingPool()  # type: ignore[assignment]  # a stand-in
        await bounded(served.close_all())  # said in the log, never raised past the sessions' ends
        return opened  # type: ignore[return-value]  # stand-ins

    assert [session.ended for session in asyncio.run(main())] == [True, True]  # before: close_all stopped at the pool
