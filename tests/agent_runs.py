"""Drive the agent loop (`AgentLoop`, the real `anthropic` SDK) against the local fake Messages API, for the
sandbox and golden tiers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anthropic
from conftest import SAMPLE_TOOLS

from cellgate.extensions.anthropic import AgentLoop, AgentRun
from cellgate.extensions.anthropic.config import AgentSettings
from cellgate.extensions.anthropic.testing import FakeMessagesAPI, reply, text
from cellgate.gate import Session


def run_agent(tmp_path: Path, script: list[Any], config: str | None = None, tools: tuple[Path, ...] = (SAMPLE_TOOLS,),
              **settings: Any) -> tuple[AgentRun, list[dict[str, Any]], Path]:
    config_path = None
    if config is not None:
        config_path = tmp_path / "cellgate.toml"
        config_path.write_text(config)
    notebook = tmp_path / "run.ipynb"

    async def go() -> tuple[AgentRun, list[dict[str, Any]]]:
        with FakeMessagesAPI(script) as api:
            client = anthropic.AsyncAnthropic(api_key="test-key", base_url=api.url, max_retries=2)
            async with Session(config=config_path, tools=list(tools), notebook=notebook, cwd=tmp_path) as session:
                run = await AgentLoop(session, client, AgentSettings(model="claude-test", **settings)).run("the task")
            return run, api.requests

    run, requests = asyncio.run(go())
    return run, requests, notebook


def results_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks the loop sent back in a request."""
    return [b for b in request["messages"][-1]["content"] if b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in block["content"])


def echo_last_result(prefix: str) -> Any:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return reply(text(prefix + " " + result_text(results_of(body)[0]).strip()))
    return answer
