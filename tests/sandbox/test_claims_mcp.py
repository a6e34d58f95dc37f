"""README claims about MCP with no test before (issue 21): structured content that fails a tool's outputSchema is
an error in the cell, never data; and `cellgate mcp serve --idle-timeout` ends a session left unused."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import CELLGATE
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.gvisor

BAD_SERVER = Path(__file__).resolve().parent.parent / "mcp_servers" / "bad_output_server.py"
MARKER = "INVALID-RESULT-7c41"  # bad_output_server.MARKER: in every string of the invalid result
SERVE = [*CELLGATE, "mcp", "serve"]



def bad_server_config(folder: Path, extra: str = "") -> Path:
    config = folder / "cellgate.toml"
    config.write_text(f"""
[mcp.servers.bad]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(BAD_SERVER))}]
[policy]
default = "deny"
[policy.tools."bad.lookup"]
decision = "allow"
[policy.tools."bad.lookup_ok"]
decision = "allow"
{extra}""")
    return config


def call_invalid(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """Call the tool whose result breaks its outputSchema; returns the cell's result and the recorded call."""
    with BlockingSession(config=bad_server_config(tmp_path), notebook=tmp_path / "run.ipynb", cwd=tmp_path) as box:
        # The same server's valid result comes back as data: the server and the path work.
        good = box.execute("print(tools.bad.lookup_ok('a@b')['tier'])")
        assert good.status == "ok" and good.stdout == "gold\n", (good.status, good.stdout, good.error)
        bad = box.execute("got = None\ntry:\n    got = tools.bad.lookup('a@b')\nfinally:\n    print('got:', got)")
    nb = nbformat.read(tmp_path / "run.ipynb", as_version=4)
    (call,) = nb.cells[1].metadata.cellgate.calls
    return bad, call


def test_a_result_failing_its_output_schema_is_an_error_in_the_cell_and_never_data(tmp_path: Path,
                                                                                   runsc: object) -> None:
    bad, call = call_invalid(tmp_path)
    assert bad.status == "error"
    assert bad.stdout == "got: None\n"  # nothing was returned to the program
    message = f"{bad.error['ename']}: {bad.error['evalue']}"
    assert bad.error["ename"] == "ToolError", message
    assert "bad.lookup" in message and "schema" in message.lower(), message
    assert call["tool"] == "bad.lookup" and call["ok"] is False and call.get("result") is None, call


def test_nothing_of_an_invalid_result_reaches_the_cell_even_in_the_error(tmp_path: Path, runsc: object) -> None:
    bad, call = call_invalid(tmp_path)
    assert bad.status == "error" and bad.error["ename"] == "ToolError"
    assert MARKER not in json.dumps(bad.error) + bad.stdout + json.dumps(call), bad.error["evalue"]
    assert "outputSchema" in bad.error["evalue"], bad.error["evalue"]


# ---------------------------------------------------------------- --idle-timeout

IDLE = 4.0


def serve_params(tmp_path: Path, run_root: Path) -> StdioServerParameters:
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[audit]\ndir = {json.dumps(str(tmp_path / "runs"))}\n[sandbox]\nsnapshot = false\n')
    # Its own run root: the sandboxes listed there are this server's and no one else's.
    return StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], "--config", str(config),
                                                         "--idle-timeout", str(IDLE)],
                                 env={**os.environ, "CELLGATE_RUN_ROOT": str(run_root)}, cwd=str(tmp_path))


def sandboxes(run_root: Path) -> set[str]:
    return {p.name for p in run_root.iterdir() if p.name.startswith("cg-")} if run_root.is_dir() else set()


async def wait_until(condition: Callable[[], Any], what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        await asyncio.sleep(0.1)


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def start_one(client: Client, run_root: Path) -> tuple[str, str, float]:
    result = await client.call_tool("execute_python", {"code": "secret = 7\nprint(secret)"})
    used = time.monotonic()
    assert text_of(result) == "7\n" and result.is_error is False, text_of(result)
    (sandbox,) = sandboxes(run_root)
    return result.structured_content["session"], sandbox, used


def test_a_session_unused_past_the_idle_timeout_is_closed_and_its_handle_fails(tmp_path: Path,
                                                                               runsc: object) -> None:
    run_root = tmp_path / "run"

    async def scenario() -> None:
        async with Client(serve_params(tmp_path, run_root)) as client:
            handle, sandbox, _ = await start_one(client, run_root)
            # The server closing the idle session (its sandbox deleted) is the event waited on, not the clock.
            await wait_until(lambda: sandbox not in sandboxes(run_root),
                             f"sandbox {sandbox} to be deleted after {IDLE:g} s idle", IDLE + 60)
            result = await client.call_tool("execute_python", {"code": "print(secret)", "session": handle})
            out = text_of(result)
            assert result.is_error and f"no session {handle!r} on this server" in out, out
            assert f"timed out after {IDLE:g} s idle" in out, out

    asyncio.run(asyncio.wait_for(scenario(), 300))


def test_an_idle_session_s_sandbox_is_gone_without_any_further_call(tmp_path: Path, runsc: object) -> None:
    run_root = tmp_path / "run"

    async def scenario() -> None:
        async with Client(serve_params(tmp_path, run_root)) as client:
            _, sandbox, _ = await start_one(client, run_root)
            await wait_until(lambda: sandbox not in sandboxes(run_root),
                             f"sandbox {sandbox} to be deleted after {IDLE:g} s idle", IDLE + 60)

    asyncio.run(asyncio.wait_for(scenario(), 300))
