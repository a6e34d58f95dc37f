"""`cellgate mcp serve` driven by the official MCP client, over stdio and streamable HTTP,
with a real MCP server configured behind it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import CELLGATE, serve_on_a_free_port
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_tools import CRM, POLICY

SERVE = [*CELLGATE, "mcp", "serve"]


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "cellgate.toml"
    config.write_text(f"""
[mcp.servers.crm]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(CRM))}]
[audit]
dir = {json.dumps(str(tmp_path / "runs"))}
{POLICY}""")
    return config


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def run_code(client: Client, code: str, session: str | None = None) -> tuple[str, Any]:
    args = {"code": code} if session is None else {"code": code, "session": session}
    result = await client.call_tool("execute_python", args)
    return text_of(result), result


def stdio_server(config: Path) -> StdioServerParameters:
    return StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], "--config", str(config)],
                                 env={**os.environ}, cwd=str(config.parent))


def test_stdio_clients_run_code_that_calls_a_server_behind_and_cannot_see_each_other(tmp_path: Path,
                                                                                      runsc: object) -> None:
    config = write_config(tmp_path)

    async def scenario() -> None:
        async with Client(stdio_server(config)) as first, Client(stdio_server(config)) as second:
            found = await first.call_tool("search_tools", {"query": "customer"})
            assert "crm.lookup_customer: Find a customer by email address." in json.dumps(found.structured_content)
            described = await first.call_tool("describe_tool", {"name": "crm.lookup_customer"})
            assert text_of(described).startswith("tools.crm.lookup_customer(email: str)")
            out, result = await run_code(first, "c = tools.crm.lookup_customer('ana@acme.example')\nprint(c['name'])")
            assert out == "Ana Silva\n" and result.is_error is False
            handle = result.structured_content["session"]
            # The same client keeps its kernel (stdio: one client per server process).
            out, _ = await run_code(first, "print(c['tier'])")
            assert out == "gold\n"
            out, other = await run_code(second, "print(c)")
            assert other.is_error and "NameError: name 'c' is not defined" in out
            assert other.structured_content["session"] != handle
            # The audit notebook is a resource of the session.
            resource = await first.read_resource(f"cellgate://sessions/{handle}/notebook")
            nb = nbformat.reads(resource.contents[0].text, as_version=4)
            assert [c.source for c in nb.cells] == ["c = tools.crm.lookup_customer('ana@acme.example')\nprint(c['name'])",
                                                    "print(c['tier'])"]
            assert nb.cells[0].metadata.cellgate.calls[0]["tool"] == "crm.lookup_customer"

    asyncio.run(asyncio.wait_for(scenario(), 240))


@pytest.fixture()
def http_serve(tmp_path: Path, runsc: object) -> Iterator[str]:
    config = write_config(tmp_path)
    log_path = tmp_path / "serve.log"
    log = log_path.open("w")

    def start(port: int) -> subprocess.Popen[str]:
        return subprocess.Popen([*SERVE, "--config", str(config), "--transport", "http", "--port", str(port),
                                 "--allow-local-users"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, text=True)

    port, process = serve_on_a_free_port(start, log_path, "cellgate mcp serve --transport http")
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    # It stops on SIGTERM by itself (wait raises TimeoutExpired if it hangs), closing its sessions.
    assert process.wait(60) in (0, -15), log_path.read_text()[-2000:]
    log.close()


def test_http_clients_get_their_own_sandboxed_sessions(http_serve: str) -> None:
    async def client_run(secret: str) -> tuple[str, str, str]:
        async with Client(http_serve) as client:
            out, result = await run_code(client, f"secret = {secret!r}\nprint(tools.crm.lookup_customer('a@b')['tier'])")
            assert out == "gold\n", out
            handle = result.structured_content["session"]
            mine, _ = await run_code(client, "print(secret)", handle)
            fresh, _ = await run_code(client, "print(secret)")  # no handle: a new session over HTTP
            return handle, mine, fresh

    async def scenario() -> None:
        (handle_a, mine_a, fresh_a), (handle_b, mine_b, fresh_b) = await asyncio.gather(
            client_run("alpha"), client_run("bravo"))
        assert (mine_a, mine_b) == ("alpha\n", "bravo\n")
        assert "NameError" in fresh_a and "NameError" in fresh_b
        assert handle_a != handle_b and len(handle_a) >= 22
        async with Client(http_serve) as stranger:
            out, result = await run_code(stranger, "print(secret)", "not-a-handle")
            assert result.is_error and "no session 'not-a-handle' on this server" in out
            closed = await stranger.call_tool("close_session", {"session": handle_a})
            assert closed.is_error is False
            out, result = await run_code(stranger, "print(secret)", handle_a)
            assert result.is_error and "no session" in out

    asyncio.run(asyncio.wait_for(scenario(), 300))


def test_a_warm_pool_hands_each_client_session_a_sandbox_started_ahead(tmp_path: Path, runsc: object) -> None:
    config = write_config(tmp_path)
    config.write_text(config.read_text() + "\n[sandbox]\npool = 1\n")

    def started_journals() -> set[str]:
        return {p.name for p in (tmp_path / "runs").glob("*.journal.jsonl") if p.read_text().strip()}

    async def scenario() -> None:
        async with Client(stdio_server(config)) as client:
            await client.call_tool("search_tools", {"query": ""})
            # Before the client asks for a session, the pool's sandbox has begun its journal (no clocks compared:
            # without a pool, no session exists until the first execute_python and this wait fails).
            deadline = asyncio.get_running_loop().time() + 120
            while not (ahead := started_journals()):
                assert asyncio.get_running_loop().time() < deadline, "no session was started ahead of the client"
                await asyncio.sleep(0.05)  # polling the run folder; the server gives no other signal
            out, result = await run_code(client, "print(tools.crm.lookup_customer('a@b')['name'])")
            assert out == "Ana Silva\n"
            handle = result.structured_content["session"]
            resource = await client.read_resource(f"cellgate://sessions/{handle}/notebook")
            nb = nbformat.reads(resource.contents[0].text, as_version=4)
            assert nb.metadata.cellgate["pool"] == {"size": 1}
            # The client got the session that was started before it asked.
            assert nb.metadata.cellgate.journal["file"] in ahead

    asyncio.run(asyncio.wait_for(scenario(), 240))
