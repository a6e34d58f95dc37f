"""`cellgate mcp serve`'s quotas belong to a lineage (issue 42, finding 2): a session and the sessions
`fork_session` made from it draw on one `[mcp.quotas] calls_per_session` and one gate budget
(`[policy] max_calls_per_session`), in this server and in a restarted one. Driven by the official MCP client
against the real server process (stdio: closing the client stops the server, which pauses its sessions)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from mcp import Client
from test_mcp_serve import run_code, stdio_server

TOOLS = '''
def ping() -> str:
    """Answer pong."""
    return "pong"
'''

QUOTA = "[mcp.quotas] calls_per_session = 3"


def write_config(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "ping_tools.py").write_text(TOOLS)
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[audit]\ndir = "runs"\n[tools]\nmodules = ["ping_tools.py"]\n{extra}\n')
    return config


async def fork(client: Client, parent: str, count: int) -> list[str]:
    forked = await client.call_tool("fork_session", {"session": parent, "count": count})
    assert forked.is_error is False, forked.content
    return list(forked.structured_content["forks"])


def refused_by_quota(out: str, result: Any) -> bool:
    return bool(result.is_error) and QUOTA in out


def test_calls_per_session_holds_across_a_parent_and_its_forks(tmp_path: Path, runsc: object) -> None:
    config = write_config(tmp_path, "[mcp.quotas]\ncalls_per_session = 3\n")

    async def scenario() -> None:
        async with Client(stdio_server(config)) as client:
            out, result = await run_code(client, "a = 1")
            parent = result.structured_content["session"]
            out, result = await run_code(client, "a += 1", parent)
            assert not result.is_error, out
            one, two = await fork(client, parent, 2)
            out, result = await run_code(client, "print(a)", one)  # the lineage's third call
            assert (out, result.is_error) == ("2\n", False), out
            for handle in (two, parent, one):
                out, result = await run_code(client, "print(a)", handle)
                assert refused_by_quota(out, result), out

    asyncio.run(asyncio.wait_for(scenario(), 300))


def test_calls_per_session_holds_across_a_restart_of_the_server(tmp_path: Path, runsc: object) -> None:
    config = write_config(tmp_path, "[mcp.quotas]\ncalls_per_session = 3\n")

    async def before() -> tuple[str, str]:
        async with Client(stdio_server(config)) as client:
            out, result = await run_code(client, "a = 1")
            parent = result.structured_content["session"]
            (one,) = await fork(client, parent, 1)
            out, result = await run_code(client, "a += 1", one)
            assert not result.is_error, out
            return parent, one  # the client closes: the server pauses both

    async def after(parent: str, one: str) -> None:
        async with Client(stdio_server(config)) as client:
            out, result = await run_code(client, "print(a)", parent)  # the lineage's third call
            assert (out, result.is_error) == ("1\n", False), out
            out, result = await run_code(client, "print(a)", one)
            assert refused_by_quota(out, result), out

    parent, one = asyncio.run(asyncio.wait_for(before(), 300))
    asyncio.run(asyncio.wait_for(after(parent, one), 300))


def test_the_gates_max_calls_per_session_holds_across_fork_session_and_a_restart(tmp_path: Path,
                                                                                 runsc: object) -> None:
    config = write_config(tmp_path, '[policy]\ndefault = "deny"\nmax_calls_per_session = 3\n'
                                    '[policy.tools.ping]\ndecision = "allow"\n')
    ping = "try:\n    print(tools.ping())\nexcept Exception as exc:\n    print(type(exc).__name__, exc)"

    async def before() -> tuple[str, str]:
        async with Client(stdio_server(config)) as client:
            out, result = await run_code(client, ping)
            assert out == "pong\n", out
            parent = result.structured_content["session"]
            (one,) = await fork(client, parent, 1)
            out, _ = await run_code(client, ping, one)
            assert out == "pong\n", out
            return parent, one

    async def after(parent: str, one: str) -> None:
        async with Client(stdio_server(config)) as client:
            out, _ = await run_code(client, ping, one)  # the lineage's third tool call
            assert out == "pong\n", out
            for handle in (parent, one):
                out, _ = await run_code(client, ping, handle)
                assert out != "pong\n" and "max_calls_per_session" in out, out

    parent, one = asyncio.run(asyncio.wait_for(before(), 300))
    asyncio.run(asyncio.wait_for(after(parent, one), 300))
