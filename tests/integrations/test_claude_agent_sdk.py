"""The Claude Agent SDK on cellgate (docs/integrations/claude_agent_sdk.md): the page's example, the real Claude Code
CLI the SDK bundles talking to the in-process MCP server, and the page's .mcp.json for Claude Code alone; the
model is the loopback fake of the streaming Messages API (tests/claude_code_fake.py), cellgate the real gVisor
sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import claude_agent_sdk
import nbformat
import pytest
from claude_code_fake import StreamingMessagesAPI
from conftest import CELLGATE, NORTHWIND  # tests/conftest.py (this folder has none of its own)

from cellgate.extensions.anthropic.testing import reply, text, tool_use

pytestmark = pytest.mark.gvisor

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "claude_agent_sdk.md"
TOOL = "mcp__cellgate__execute_python"
DENIED = ('try:\n    tools.create_task("202610-00001", "refund")\n'
          'except Exception as exc:\n    print("refused:", type(exc).__name__)\n    raise\n')


def page_block(language: str) -> str:
    return re.findall(rf"^```{language}\n(.*?)^```$", PAGE.read_text(), re.M | re.S)[0]


def page_example() -> dict[str, Any]:
    module = types.ModuleType("claude_agent_sdk_example")
    sys.modules[module.__name__] = module
    exec(compile(page_block("python"), str(PAGE), "exec", dont_inherit=True), module.__dict__)
    return module.__dict__


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


def said(result: dict[str, Any]) -> str:
    content = result["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


def scripted(*cells: str) -> Any:
    """Runs each cell with execute_python in turn, then answers with what the last one printed."""
    def model(body: dict[str, Any]) -> dict[str, Any]:
        if TOOL not in {t["name"] for t in body.get("tools") or []}:
            return reply(text("(a request without cellgate's tools)"))
        done = tool_results(body)
        if len(done) < len(cells):
            return reply(tool_use(TOOL, {"code": cells[len(done)]}, f"toolu_cell{len(done) + 1}"))
        return reply(text(said(done[-1]).strip()))
    return model


def offline(api: StreamingMessagesAPI, home: Path) -> dict[str, str]:
    """The CLI's environment: the fake API, a home of its own, no traffic elsewhere."""
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-offline-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "ENABLE_TOOL_SEARCH": "false"}


def recorded_calls(notebook: Path) -> list[dict[str, Any]]:
    cells = nbformat.read(notebook, as_version=4).cells
    return [call for cell in cells for call in cell.metadata.get("cellgate", {}).get("calls", [])]


def northwind(tmp_path: Path) -> Path:
    work = tmp_path / "northwind"
    shutil.copytree(NORTHWIND, work, ignore=shutil.ignore_patterns("runs"))
    return work


def test_the_page_example_runs_northwind_through_the_gate(tmp_path: Path, runsc: object) -> None:
    work = northwind(tmp_path)
    with StreamingMessagesAPI(scripted((NORTHWIND / "late_orders.py").read_text())) as api:
        answer, notebook = asyncio.run(page_example()["main"](work, env=offline(api, tmp_path / "home")))
        requests = list(api.requests)
    assert answer == "10000 312"
    assert [said(r) for r in tool_results(requests[-1])] == ["10000 312\n"]
    calls = recorded_calls(notebook)
    assert [(c["tool"], c["decision"]) for c in calls if c["tool"] == "list_orders"] == [("list_orders", "allow")]
    tasks = [c for c in calls if c["tool"] == "create_task"]
    assert len(tasks) == 312 and {c["decision"] for c in tasks} == {"allow"}  # the follow-up rule allows them


def test_a_denied_tool_is_refused_inside_the_agent_loop(tmp_path: Path, runsc: object) -> None:
    work = northwind(tmp_path)
    config = work / "cellgate.toml"
    config.write_text(config.read_text().replace('decision = "approve"', 'decision = "deny"', 1))
    with StreamingMessagesAPI(scripted(DENIED)) as api:
        answer, notebook = asyncio.run(page_example()["main"](work, env=offline(api, tmp_path / "home")))
        requests = list(api.requests)
    [result] = tool_results(requests[-1])
    assert result.get("is_error") is True and "refused: ToolDenied" in said(result), result
    assert "ToolDenied" in str(answer)
    assert [(c["tool"], c["decision"]) for c in recorded_calls(notebook)] == [("create_task", "deny")]


def test_the_pages_mcp_json_runs_claude_code_against_cellgate(tmp_path: Path, runsc: object) -> None:
    work = northwind(tmp_path)
    servers = json.loads(page_block("json"))
    server = servers["mcpServers"]["cellgate"]
    assert server["command"] == "cellgate"
    # this test's cellgate (the venv's, as `cellgate` on PATH would be) and its key and run root (CELLGATE_*)
    server.update(command=CELLGATE[0], args=[*CELLGATE[1:], *server["args"]],
                  env={k: v for k, v in os.environ.items() if k.startswith("CELLGATE_")})
    (work / ".mcp.json").write_text(json.dumps(servers))
    cli = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    with StreamingMessagesAPI(scripted((NORTHWIND / "late_orders.py").read_text())) as api:
        env.update(offline(api, tmp_path / "home"))
        done = subprocess.run([str(cli), "-p", "Follow up October's late NorthPost orders.", "--mcp-config",
                               ".mcp.json", "--strict-mcp-config", "--allowedTools", TOOL, "--output-format", "json"],
                              cwd=work, env=env, capture_output=True, text=True, timeout=280)
        requests = list(api.requests)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [result] = tool_results(requests[-1])
    assert "10000 312" in json.dumps(result), result
    [notebook] = (work / "runs").glob("**/*.ipynb")
    calls = recorded_calls(notebook)
    assert len(calls) == 313 and {c["decision"] for c in calls} == {"allow"}
