"""README claims about `cellgate run` with no test before (issue 21): the `api_error` ending after the SDK's own
retries, `--verbose` printing the prompt's and tool definitions' size in tokens, and `[agent] image_limit_kb`.

The model is the local FakeMessagesAPI spoken to by the real `anthropic` SDK; programs run in real gVisor."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import anthropic
import nbformat
import pytest
from conftest import cellgate

from cellgate.extensions.anthropic import AgentLoop
from cellgate.extensions.anthropic.config import AgentSettings
from cellgate.extensions.anthropic.testing import APIFailure, FakeMessagesAPI, estimate_tokens, reply, text, tool_use
from cellgate.gate import Session

pytestmark = pytest.mark.gvisor

SAMPLE = Path(__file__).resolve().parent.parent / "tools" / "sample_tools.py"
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="



def noise_png(side: int) -> bytes:
    """A valid PNG of random grey pixels (incompressible, so its size is about side * side bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rng = random.Random(21)
    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(side)) for _ in range(side))
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def results_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in request["messages"][-1]["content"] if b.get("type") == "tool_result"]


def cli_run(tmp_path: Path, api: FakeMessagesAPI, *args: str) -> subprocess.CompletedProcess[str]:
    return cellgate("run", "the task", "--tools", str(SAMPLE), "--notebook", str(tmp_path / "run.ipynb"),
                    "--model", "claude-test", *args, cwd=tmp_path, timeout=300,
                    env={"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.url})


def test_api_errors_past_the_sdk_retries_end_the_run_as_api_error(tmp_path: Path, runsc: object) -> None:
    # One good turn, then the API fails on every attempt the SDK makes (its first try and 2 retries).
    script: list[Any] = [reply(tool_use("execute_python", {"code": "print(6 * 7)"})),
                         APIFailure(529), APIFailure(529), APIFailure(529),
                         reply(text("never reached"))]
    notebook = tmp_path / "run.ipynb"

    async def go() -> tuple[Any, int, int]:
        with FakeMessagesAPI(script) as api:
            client = anthropic.AsyncAnthropic(api_key="test-key", base_url=api.url, max_retries=2)
            async with Session(tools=[SAMPLE], notebook=notebook, cwd=tmp_path) as session:
                run = await AgentLoop(session, client, AgentSettings(model="claude-test")).run("the task")
            return run, len(api.requests), len(api.script)

    run, asked, left = asyncio.run(go())
    assert run.ended == "api_error", (run.ended, run.detail)
    assert "overloaded_error" in run.detail and "scripted failure" in run.detail, run.detail
    assert (asked, left) == (4, 1)  # the turn, then exactly the SDK's 3 attempts; the loop did not go on
    assert run.turns == 1
    agent = nbformat.read(notebook, as_version=4).metadata.cellgate.agent
    assert agent["ended"]["reason"] == "api_error" and "overloaded_error" in agent["ended"]["detail"]
    code = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    assert [c.source for c in code] == ["print(6 * 7)"]  # the work done before the failure is kept
    shown = cellgate("show", str(notebook), timeout=120, env={"COLUMNS": "200"})
    assert "ended api_error" in shown.stdout, shown.stdout


def test_verbose_prints_the_prompt_and_tool_definitions_size_in_tokens(tmp_path: Path, runsc: object) -> None:
    with FakeMessagesAPI([reply(text("done"))]) as api:
        done = cli_run(tmp_path, api, "--verbose")
        requests = api.requests
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    # count_tokens gets what the first request sends (system, tools, the task), so the fake's count of it is known.
    expected = estimate_tokens(requests[0])
    assert f"system prompt and tools: {expected:,} tokens (by the API's count_tokens; 1 tool definitions)" in said, said
    quiet_path = tmp_path / "quiet"
    quiet_path.mkdir()
    with FakeMessagesAPI([reply(text("done"))]) as api:
        quiet = cli_run(quiet_path, api)
    assert quiet.returncode == 0 and "system prompt and tools" not in quiet.stderr


def test_an_image_over_image_limit_kb_goes_to_the_model_as_a_note_not_an_image(tmp_path: Path,
                                                                               runsc: object) -> None:
    big = noise_png(64)  # ~4 KB, over a 2 KB limit; the 1x1 pixel is under it
    assert len(big) > 2048
    program = ("import base64\nfrom IPython.display import Image, display\n"
               f"display(Image(data=base64.b64decode('{base64.b64encode(big).decode()}'), format='png'))\n"
               f"display(Image(data=base64.b64decode('{PIXEL}'), format='png'))\nprint('shown')")
    (tmp_path / "cellgate.toml").write_text(f'[tools]\nmodules = [{json.dumps(str(SAMPLE))}]\n'
                                             "[agent]\nimage_limit_kb = 2\n")
    script: list[Any] = [reply(tool_use("execute_python", {"code": program})), reply(text("seen"))]
    with FakeMessagesAPI(script) as api:
        done = cli_run(tmp_path, api, "--config", str(tmp_path / "cellgate.toml"))
        requests = api.requests
    assert done.returncode == 0, done.stderr
    [result] = results_of(requests[1])
    images = [b for b in result["content"] if b["type"] == "image"]
    assert [base64.b64decode(b["source"]["data"]) for b in images] == [base64.b64decode(PIXEL)]
    said = "".join(b.get("text", "") for b in result["content"])
    assert (f"[an image (image/png, {len(big):,} bytes) is over the 2,048 byte limit for the model; "
            "it is in the audit notebook run.ipynb]") in said, said
    assert base64.b64encode(big).decode()[:200] not in json.dumps(result)  # none of it went back to the model
    # The audit notebook keeps the image whole.
    code = next(c for c in nbformat.read(tmp_path / "run.ipynb", as_version=4).cells if c.cell_type == "code")
    kept = [base64.b64decode(o["data"]["image/png"]) for o in code.outputs if "image/png" in o.get("data", {})]
    assert kept == [big, base64.b64decode(PIXEL)]
