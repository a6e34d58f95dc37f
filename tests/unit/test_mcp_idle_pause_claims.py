"""docs/mcp.md on `cellgate mcp serve`'s paused sessions (issue 43, suite item 8: `idle_pause` vs `--idle-timeout`
vs the quotas), lines 88-93:

- "`--idle-timeout` still ends a session unused that long, paused or not ... so `idle_pause` must be below it":
  a server configured otherwise refuses to start, naming both.
- "Paused sessions count against a principal's `[mcp.quotas] sessions`, not against `--max-sessions` (which
  counts running sandboxes)".

The quota tests drive ``Sessions`` with a real ``Parking`` holding paused entries and stand-in sessions (what is
counted does not depend on them; with real sandboxes: tests/sandbox/test_mcp_live.py).
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

from cellgate.extensions.mcp.config import McpQuotas
from cellgate.extensions.mcp.parked import Owner, Parked, Parking
from cellgate.extensions.mcp.sessions import Sessions
from tests.conftest import cellgate
from tests.unit.test_mcp_admission_quotas import ALICE, BOB, Held, bounded, refusal


def park(parking: Parking, count: int) -> None:
    """``count`` paused sessions of Alice's in the state folder."""
    for _ in range(count):
        parking.park(secrets.token_urlsafe(16), Parked(checkpoint=secrets.token_hex(16), manifest=secrets.token_hex(32),
                                                       owner=Owner(name=ALICE.name, issuer=ALICE.issuer),
                                                       used=1e12, calls=1))


def table(tmp_path: Path, held: Held, max_sessions: int, **quotas: Any) -> Sessions:
    return Sessions({}, False, max_sessions, idle_timeout=3600, quotas=McpQuotas(**quotas), opener=held,  # type: ignore[arg-type]
                    parking=Parking(tmp_path / "state"), idle_pause=60)


def test_paused_sessions_count_against_the_principals_sessions_quota(tmp_path: Path) -> None:
    async def scenario() -> None:
        held = Held()
        held.release.set()
        sessions = table(tmp_path, held, max_sessions=8, sessions=2)
        assert sessions.parking is not None
        park(sessions.parking, 1)
        await bounded(sessions.admit(None, ALICE))  # 1 paused + 1 running: at the quota
        said = await refusal(asyncio.create_task(sessions.admit(None, ALICE)))
        assert "principal 'alice' already has 2 sessions open" in said and "paused ones included" in said, said
        await bounded(sessions.admit(None, BOB))  # another principal's quota holds none of Alice's
        assert held.entered == ["alice", "bob"]

    asyncio.run(scenario())


def test_paused_sessions_do_not_count_against_max_sessions(tmp_path: Path) -> None:
    async def scenario() -> None:
        held = Held()
        held.release.set()
        sessions = table(tmp_path, held, max_sessions=1)
        assert sessions.parking is not None
        park(sessions.parking, 3)  # three paused: no sandbox runs for them
        await bounded(sessions.admit(None, ALICE))
        said = await refusal(asyncio.create_task(sessions.admit(None, BOB)))  # one running: the cap
        assert "already runs or starts 1 sessions (--max-sessions 1)" in said, said
        assert held.entered == ["alice"]

    asyncio.run(scenario())


def test_idle_pause_at_or_over_the_idle_timeout_refuses_the_server(tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text("[mcp]\nidle_pause = 600\n")
    for timeout in ("600", "300"):
        done = cellgate("mcp", "serve", "--idle-timeout", timeout, cwd=tmp_path, stdin="")
        said = done.stdout + done.stderr
        assert done.returncode != 0, said
        assert (f"[mcp] idle_pause = 600 is not below --idle-timeout {timeout}: sessions would end before they "
                "pause") in said, said
        assert "Traceback" not in said and not (tmp_path / "runs" / "mcp-serve").exists()
