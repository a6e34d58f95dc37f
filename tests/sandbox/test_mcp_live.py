"""Live sessions over MCP (issue 34): `cellgate mcp serve` pauses a session into a checkpoint when it stops (SIGTERM)
and when it is idle (`[mcp] idle_pause`), resumes it on the next call with its handle (in a restarted server too),
and forks one with `fork_session`. Driven by the official MCP client against the real server process."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import stat
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import nbformat
from conftest import CELLGATE, serve_on_a_free_port
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from test_mcp_serve import run_code, stdio_server

from cellgate.gate.audit.journal import read_journal


def write_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[audit]\ndir = "runs"\n{extra}\n')
    return config


def state(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "mcp-serve"  # the server's state folder: [audit] dir / mcp-serve


def parked(tmp_path: Path) -> dict[str, Any]:
    path = state(tmp_path) / "parked.json"
    return json.loads(path.read_text())["sessions"] if path.exists() else {}


def events(tmp_path: Path, notebook: dict[str, Any]) -> list[str]:
    journal = tmp_path / "runs" / notebook["metadata"]["cellgate"]["journal"]["file"]
    return [record["event"] for record in read_journal(journal).records]


async def notebook_of(client: Client, handle: str) -> Any:
    resource = await client.read_resource(f"cellgate://sessions/{handle}/notebook")
    return nbformat.reads(resource.contents[0].text, as_version=4)


async def until(condition: Callable[[], bool], what: str, seconds: float = 120) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"not within {seconds} s: {what}"
        await asyncio.sleep(0.05)  # polling the state folder: the server gives no other signal


class HttpServer:
    """`cellgate mcp serve --transport http` with static tokens for alice and bob, started and stopped by the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path
        self.tokens = {name: secrets.token_urlsafe(32) for name in ("alice", "bob")}
        (tmp_path / "tokens").write_text("".join(f"{n} {t}\n" for n, t in self.tokens.items()))
        write_config(tmp_path, '[mcp.auth]\ntokens_file = "tokens"\n')
        self.log = tmp_path / "serve.log"
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> None:
        log = self.log.open("a")

        def start(port: int) -> subprocess.Popen[str]:
            return subprocess.Popen([*CELLGATE, "mcp", "serve", "--transport", "http", "--port", str(port)],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=self.folder, text=True)

        port, self.process = serve_on_a_free_port(start, self.log, "cellgate mcp serve --transport http")
        log.close()
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()  # SIGTERM
        assert self.process.wait(120) in (0, -15), self.log.read_text()[-3000:]
        self.process = None

    @asynccontextmanager
    async def client(self, who: str) -> AsyncIterator[Client]:
        headers = {"authorization": f"Bearer {self.tokens[who]}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http, \
                Client(streamable_http_client(self.url, http_client=http)) as client:
            yield client


def test_a_session_survives_a_restart_of_the_server_for_its_owner_only(tmp_path: Path, runsc: object) -> None:
    server = HttpServer(tmp_path)
    server.start()
    try:
        async def before() -> str:
            async with server.client("alice") as alice:
                out, result = await run_code(alice, "import itertools\nx = 41\ncount = itertools.count(5)\n"
                                                    "print(next(count))")
                assert out == "5\n", out
                return str(result.structured_content["session"])

        handle = asyncio.run(asyncio.wait_for(before(), 240))
        server.stop()
        # The session was paused, not ended: its handle and owner kept in the server's own files.
        assert parked(tmp_path)[handle]["owner"] == {"name": "alice", "issuer": "static-token"}
        assert stat.S_IMODE(os.stat(state(tmp_path)).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(state(tmp_path) / "parked.json").st_mode) == 0o600
        checkpoint = state(tmp_path) / "checkpoints" / parked(tmp_path)[handle]["checkpoint"]
        assert (checkpoint / "checkpoint.json").is_file()

        server.start()

        async def after() -> None:
            async with server.client("bob") as bob:  # another principal: the very error a made-up handle gets
                out, result = await run_code(bob, "print(x)", handle)
                assert result.is_error and f"no session {handle!r} on this server" in out
            assert handle in parked(tmp_path)  # bob's attempt left it as it was
            async with server.client("alice") as alice:
                out, result = await run_code(alice, "print(x + 1, next(count))", handle)
                assert (out, result.is_error) == ("42 6\n", False)
                assert result.structured_content["session"] == handle
                notebook = await notebook_of(alice, handle)
            assert [cell.source for cell in notebook.cells if cell.cell_type == "code"] == [
                "import itertools\nx = 41\ncount = itertools.count(5)\nprint(next(count))",
                "print(x + 1, next(count))"]
            recorded = events(tmp_path, notebook)
            assert recorded.index("session-paused") < recorded.index("session-resumed")
            assert handle not in parked(tmp_path) and not checkpoint.exists()  # resumed once, its checkpoint spent

        asyncio.run(asyncio.wait_for(after(), 240))
    finally:
        if server.process is not None:
            server.stop()


def test_an_idle_session_is_paused_and_the_next_call_resumes_it(tmp_path: Path, runsc: object) -> None:
    config = write_config(tmp_path, "[mcp]\nidle_pause = 1\n")

    async def scenario() -> None:
        async with Client(stdio_server(config)) as client:
            out, result = await run_code(client, "y = [1, 2, 3]\nprint(len(y))")
            assert out == "3\n"
            handle = result.structured_content["session"]
            notebook = await notebook_of(client, handle)
            await until(lambda: handle in parked(tmp_path), "the idle session was paused")
            checkpoint = state(tmp_path) / "checkpoints" / parked(tmp_path)[handle]["checkpoint"]
            assert (checkpoint / "checkpoint.json").is_file()
            assert events(tmp_path, notebook)[-1] == "session-paused"  # its sandbox stopped, the record says so
            out, result = await run_code(client, "print(sum(y))", handle)
            assert (out, result.is_error) == ("6\n", False)
            assert not checkpoint.exists()
            recorded = events(tmp_path, notebook)
            assert recorded.count("session-paused") == 1 and "session-resumed" in recorded
            assert recorded.index("session-resumed") > recorded.index("session-paused")

    asyncio.run(asyncio.wait_for(scenario(), 200))


def test_fork_session_gives_independent_sessions_that_start_with_the_parents_variables(tmp_path: Path,
                                                                                         runsc: object) -> None:
    config = write_config(tmp_path, "[mcp.quotas]\nsessions = 3\n")

    async def scenario() -> None:
        async with Client(stdio_server(config)) as client:
            out, result = await run_code(client, "v = 'parent'\ndata = list(range(5))\nprint(len(data))")
            assert out == "5\n"
            parent = result.structured_content["session"]
            refused = await client.call_tool("fork_session", {"session": parent, "count": 3})
            assert refused.is_error and "[mcp.quotas] sessions = 3" in refused.content[0].text
            forked = await client.call_tool("fork_session", {"session": parent, "count": 2})
            assert forked.is_error is False, forked.content
            one, two = forked.structured_content["forks"]
            assert len({parent, one, two}) == 3
            out, _ = await run_code(client, "v = 'one'\ndata.append(5)\nprint(v, sum(data))", one)
            assert out == "one 15\n"
            out, _ = await run_code(client, "print(v, sum(data))", two)
            assert out == "parent 10\n"
            out, _ = await run_code(client, "print(v, sum(data))", parent)
            assert out == "parent 10\n"
            notebook = await notebook_of(client, one)
            assert [cell.source for cell in notebook.cells if cell.cell_type == "code"] == ["v = 'one'\ndata.append(5)\nprint(v, sum(data))"]
            origin = notebook.metadata.cellgate["forked_from"]
            assert origin["fork"] in (1, 2) and origin["of"] == 2
            parent_notebook = await notebook_of(client, parent)
            assert Path(origin["notebook"]).name == Path(parent_notebook.metadata.cellgate.journal["file"]).name.replace(
                ".journal.jsonl", ".ipynb")
            assert "session-forked" in events(tmp_path, parent_notebook)
            assert not any((state(tmp_path) / "checkpoints").iterdir())  # the forks' checkpoint is gone once they run

    asyncio.run(asyncio.wait_for(scenario(), 200))
