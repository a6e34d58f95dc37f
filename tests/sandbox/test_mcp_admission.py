"""One principal's slow session start holds up no other principal (issue 28): `cellgate mcp serve`'s sessions with
real gVisor sandboxes, Carol's start held by the test (``Sessions(opener=...)``) until Alice's call in her session
and Bob's new session have run. The order of what happened is the assertion, not how long anything took. The
quotas under concurrency: tests/unit/test_mcp_admission_quotas.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cellgate.extensions.mcp.auth import STATIC, Principal
from cellgate.extensions.mcp.sessions import Sessions
from cellgate.gate import Session

ALICE, BOB, CAROL = (Principal(name, STATIC) for name in ("alice", "bob", "carol"))


def test_two_principals_calls_run_while_a_third_principals_start_is_held(tmp_path: Path, runsc: object) -> None:
    (tmp_path / "cellgate.toml").write_text(f'[audit]\ndir = "{tmp_path / "runs"}"\n')
    options = {"config": str(tmp_path / "cellgate.toml"), "tools": [], "isolation": None}
    events: list[str] = []

    async def scenario() -> None:
        held, release = asyncio.Event(), asyncio.Event()

        async def opener(owner: Principal | None) -> Session:
            if owner == CAROL:
                events.append("carol's start held")
                held.set()
                await release.wait()
                events.append("carol's start released")
            return await Session(**options).start()

        async def call(handle: str | None, owner: Principal, code: str) -> str:
            handle, entry = await table.admit(handle, owner)  # as execute_python runs a call
            async with entry.lock:
                result = await entry.session.execute(code)
            events.append(f"{owner.name}: {result.text.strip()}")
            return handle

        table = Sessions(options, single_client=False, max_sessions=8, idle_timeout=3600, opener=opener)
        await table.start()
        try:
            alice = await call(None, ALICE, "x = 'alice'\nprint(x)")
            carol = asyncio.create_task(call(None, CAROL, "print('carol')"))
            await asyncio.wait_for(held.wait(), 120)
            others = asyncio.gather(call(alice, ALICE, "print(x, 'again')"), call(None, BOB, "print('bob')"))
            # Bounded: behind a server-wide lock they would wait for Carol's start, which waits for them.
            await asyncio.wait({others}, timeout=240)
            release.set()
            await asyncio.wait_for(asyncio.gather(others, carol), 240)
        finally:
            await table.close_all()

    asyncio.run(scenario())
    assert events[:2] == ["alice: alice", "carol's start held"], events
    assert sorted(events[2:4]) == ["alice: alice again", "bob: bob"], events
    assert events[4:] == ["carol's start released", "carol: carol"], events
