"""The 10-write loop through `cellgate mcp serve`, driven by the official MCP client over stdio: the failed cell's
result names the 7 committed writes (text and structuredContent), and `retry: true` makes only the 3 missing."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import nbformat
import pytest
from conftest import CELLGATE, cellgate
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_mcp_serve import text_of
from test_writes_retry import LOOP, TOOLS, lines

from cellgate.gate.audit.verify import check_run

pytestmark = pytest.mark.gvisor


def test_an_mcp_client_is_told_the_committed_writes_and_its_retry_makes_only_the_missing_ones(
        tmp_path: Path, runsc: object) -> None:
    world = tmp_path / "world.jsonl"
    (tmp_path / "tasks.py").write_text(TOOLS)
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[tools]\nmodules = ["tasks.py"]\n\n[audit]\ndir = {json.dumps(str(tmp_path / "runs"))}\n\n'
                      '[policy]\ndefault = "allow"\n')
    server = StdioServerParameters(command=CELLGATE[0], args=[*CELLGATE[1:], "mcp", "serve", "--config", str(config)],
                                   env={**os.environ, "CELLGATE_TEST_WORLD": str(world)}, cwd=str(tmp_path))

    async def scenario() -> None:
        async with Client(server) as client:
            failed = await client.call_tool("execute_python", {"code": "BROKEN = True\n" + LOOP})
            assert failed.is_error
            handle = failed.structured_content["session"]
            writes = failed.structured_content["writes"]
            assert [w["args"] for w in writes["committed"]] == [{"title": f"task {i}"} for i in range(7)]
            told = text_of(failed)
            assert "Writes: 7 committed" in told and 'create_task(title="task 6")' in told and "retry" in told
            assert len(lines(world)) == 7
            retried = await client.call_tool("execute_python", {"code": "BROKEN = False\n" + LOOP,
                                                                "session": handle, "retry": True})
            assert not retried.is_error, text_of(retried)
            writes = retried.structured_content["writes"]
            assert (len(writes["answered"]), len(writes["committed"]), writes["reads"]) == (7, 3, 1)
            assert "7 answered from the record" in text_of(retried)
            assert [t["title"] for t in lines(world)] == [f"task {i}" for i in range(10)]
            # A retry with nothing to retry is the client's mistake: an error result, nothing run.
            refused = await client.call_tool("execute_python", {"code": LOOP, "session": handle, "retry": True})
            assert refused.is_error and "nothing to retry" in text_of(refused)
            assert len(lines(world)) == 10

    asyncio.run(scenario())


def test_cellgate_exec_names_a_failed_program_s_writes_and_its_notebook_notes_them(
        tmp_path: Path, runsc: object) -> None:
    world = tmp_path / "world.jsonl"
    (tmp_path / "tasks.py").write_text(TOOLS)
    (tmp_path / "loop.py").write_text("BROKEN = True\n" + LOOP)
    notebook = tmp_path / "run.ipynb"
    done = cellgate("exec", str(tmp_path / "loop.py"), "--tools", str(tmp_path / "tasks.py"), "--notebook",
                    str(notebook), cwd=tmp_path, env={"CELLGATE_TEST_WORLD": str(world)})
    assert done.returncode == 1 and len(lines(world)) == 7
    assert "Writes: 7 committed; 0 reads." in done.stderr and 'create_task(title="task 6") -> id T-7' in done.stderr
    assert "retry=True" in done.stderr
    nb = nbformat.read(notebook, as_version=4)
    [cell] = nb.cells
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs)
    assert "after writes that stay in the world" in shown and "task 6" in shown
    assert check_run(notebook).problems == []
