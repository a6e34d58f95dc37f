"""Claude Code, the real CLI bundled in the `claude-agent-sdk` wheel, driving `cellgate mcp serve` over stdio
from its `.mcp.json` (issue 29, item 2): the model it talks to is a scripted streaming Messages API on loopback
(tests/claude_code_fake.py), so the test runs offline and reads the tool_result blocks the CLI sends back.

Claude Code hands its model a tool's structuredContent and its images, not the text content beside them: so
what the program printed must be in the structuredContent, and a chart must come back as an image."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_code_fake import StreamingMessagesAPI
from conftest import CELLGATE, NORTHWIND

from cellgate.extensions.anthropic.testing import reply, text, tool_use

pytestmark = pytest.mark.gvisor

TOOL = "mcp__cellgate__execute_python"

# A bar chart drawn without matplotlib (the sandbox has the gate's packages only): the same source builds it in
# the sandbox, from the session's variables, and here, for the comparison.
CHART = '''
import struct, zlib

def bar_chart_png(values, width=12, gap=4, height=40):
    top = max(values) or 1
    bars = [round(v * height / top) for v in values]
    def pixel(x, y):
        n, offset = divmod(x, width + gap)
        inside = n < len(bars) and offset < width and height - y <= bars[n]
        return b"\\x1f\\x77\\xb4" if inside else b"\\xff\\xff\\xff"
    side = len(bars) * (width + gap)
    rows = b"".join(b"\\x00" + b"".join(pixel(x, y) for x in range(side)) for y in range(height))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", side, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return b"\\x89PNG\\r\\n\\x1a\\n" + body
'''
CARRIERS = ("NorthPost", "SwiftShip", "ParcelCo", "BlueLine")
PLOT = (CHART + "from IPython.display import Image, display\n"
        f"late_by_carrier = [sum(o['carrier'] == c and o['days_late'] > 5 for o in orders) for c in {CARRIERS!r}]\n"
        "display(Image(data=bar_chart_png(late_by_carrier)))\nprint('late by carrier:', late_by_carrier)\n")
FAIL = "import sys\nprint('checking', file=sys.stderr)\n{}['missing']\n"


def claude_cli() -> Path:
    """The Claude Code executable the wheel ships (what the SDK runs when no other CLI is configured)."""
    cli = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    assert cli.is_file() and os.access(cli, os.X_OK), f"no Claude Code CLI at {cli}: reinstall claude-agent-sdk"
    return cli


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


def blocks(result: dict[str, Any]) -> list[dict[str, Any]]:
    content = result["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def structured(result: dict[str, Any]) -> dict[str, Any]:
    """The cell's structuredContent as the CLI handed it to the model: a text block that is its JSON."""
    for block in blocks(result):
        if block["type"] == "text" and block["text"].startswith("{"):
            data: dict[str, Any] = json.loads(block["text"])
            return data
    raise AssertionError(f"no JSON text block in the tool_result: {json.dumps(result)[:2000]}")


def model(body: dict[str, Any]) -> dict[str, Any]:
    """Three programs, one a turn (the Northwind count, a chart of the same orders, a failing one), then done."""
    if TOOL not in {t["name"] for t in body.get("tools") or []}:
        return reply(text("(a request without cellgate's tools)"))
    steps = [(NORTHWIND / "late_orders.py").read_text(), PLOT, FAIL]
    done = len(tool_results(body))
    if done < len(steps):
        return reply(tool_use(TOOL, {"code": steps[done]}, f"toolu_cell{done + 1}"))
    return reply(text("All three programs ran."))


def expected_chart(folder: Path) -> bytes:
    spec = importlib.util.spec_from_file_location("northwind_tools", folder / "tools.py")
    assert spec is not None and spec.loader is not None
    northwind = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(northwind)
    orders = northwind.list_orders("2026-10")
    space: dict[str, Any] = {}
    exec(CHART, space)
    return space["bar_chart_png"]([sum(o["carrier"] == c and o["days_late"] > 5 for o in orders) for c in CARRIERS])


def test_claude_code_sees_what_the_program_printed_and_its_chart(tmp_path: Path, runsc: object) -> None:
    work = tmp_path / "northwind"
    shutil.copytree(NORTHWIND, work, ignore=shutil.ignore_patterns("runs"))
    (work / ".mcp.json").write_text(json.dumps({"mcpServers": {"cellgate": {
        "type": "stdio", "command": CELLGATE[0], "args": [*CELLGATE[1:], "mcp", "serve", "--config", "cellgate.toml"],
        "env": {k: v for k, v in os.environ.items() if k.startswith("CELLGATE_")}}}}))  # this run's key, run root
    home = tmp_path / "home"
    home.mkdir()
    env = {name: value for name, value in os.environ.items() if not name.startswith(("ANTHROPIC_", "CLAUDE"))}
    with StreamingMessagesAPI(model) as api:
        env.update(HOME=str(home), ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-ant-offline-test",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1", ENABLE_TOOL_SEARCH="false")
        done = subprocess.run([str(claude_cli()), "-p", "Count October's late NorthPost orders and chart them.",
                               "--mcp-config", ".mcp.json", "--strict-mcp-config", "--allowedTools", TOOL,
                               "--output-format", "json"],
                              cwd=work, env=env, capture_output=True, text=True, timeout=280)
        requests = list(api.requests)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(done.stdout)["result"] == "All three programs ran."
    offered = {t["name"] for t in requests[0]["tools"]}
    assert {TOOL, "mcp__cellgate__search_tools", "mcp__cellgate__describe_tool"} <= offered
    count, chart, failed = tool_results(requests[-1])

    # The Northwind program's output is what the model reads (before: only session, status, calls, notebook).
    seen = structured(count)
    assert seen.get("stdout") == "10000 312\n" and seen["status"] == "ok" and seen["calls"] == 313, seen
    assert "10000 312" in json.dumps(count)

    # The chart comes back as an image block holding the PNG the program drew, not its repr.
    images = [b for b in blocks(chart) if b["type"] == "image"]
    assert [(b["source"]["media_type"], base64.b64decode(b["source"]["data"])) for b in images] == [
        ("image/png", expected_chart(work))], json.dumps(chart)[:2000]
    seen = structured(chart)
    assert seen["stdout"].startswith("[image 1: image/png, ") and "late by carrier: [312, " in seen["stdout"]
    assert "IPython.core.display.Image object" not in json.dumps(chart)

    # A failing program: the model is told it failed, what it wrote to stderr and why.
    assert failed.get("is_error") is True, failed
    said = json.dumps(failed)
    assert "KeyError: 'missing'" in said and "checking" in said, said

