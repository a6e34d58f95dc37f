"""The frameworks' code tools take ``retry`` and name a failed cell's writes: the Claude Agent SDK's execute_python,
pydantic-ai's run_code (driven by pydantic-ai's FunctionModel) and deepagents' python tool, each on a real
session in the gVisor sandbox, the tools writing to a file on the host (as in test_writes_retry)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from test_writes_retry import LOOP, TOOLS, lines

from cellgate.extensions.claude_agent_sdk import execute_python_tool
from cellgate.extensions.langgraph import python_tool
from cellgate.extensions.pydantic_ai import CellgateCodeMode
from cellgate.gate import Session, SyncSession

pytestmark = pytest.mark.gvisor

FAILING = "BROKEN = True\n" + LOOP
FIXED = "BROKEN = False\n" + LOOP
MADE = [f'create_task(title="task {i}") -> id T-{i + 1}' for i in range(7)]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "world.jsonl"
    monkeypatch.setenv("CELLGATE_TEST_WORLD", str(path))
    (tmp_path / "tasks.py").write_text(TOOLS)
    return path


def told_the_seven(text: str, hint: str) -> None:
    assert "Writes: 7 committed; 0 reads." in text and all(made in text for made in MADE), text
    assert f"fix the code and {hint}" in text, text


def test_claude_agent_sdks_execute_python_retries_a_failed_cell(tmp_path: Path, world: Path, runsc: object) -> None:
    async def scenario() -> None:
        async with Session(tools=[str(tmp_path / "tasks.py")], notebook=tmp_path / "run.ipynb",
                           cwd=tmp_path) as session:
            tool = execute_python_tool(session)
            assert tool.input_schema["properties"]["retry"]["type"] == "boolean"  # type: ignore[index]
            failed = await tool.handler({"code": FAILING})
            assert failed["is_error"] is True
            told_the_seven(failed["content"][0]["text"], "call execute_python again with retry: true")
            retried = await tool.handler({"code": FIXED, "retry": True})
            assert retried["is_error"] is False
            assert "Writes: 3 committed, 7 answered from the record; 1 read." in retried["content"][0]["text"]
            refused = await tool.handler({"code": FIXED, "retry": True})
            assert refused["is_error"] is True and "nothing to retry" in refused["content"][0]["text"]
        assert len(lines(world)) == 10

    asyncio.run(scenario())


def test_pydantic_ais_run_code_retries_a_failed_cell(tmp_path: Path, world: Path, runsc: object) -> None:
    def create_task(title: str) -> dict[str, str]:
        """Create a task (a write)."""
        with open(os.environ["CELLGATE_TEST_WORLD"], "a") as f:
            task = {"id": f"T-{len(lines(world)) + 1}", "title": title}
            f.write(json.dumps(task) + "\n")
        return task

    def list_tasks() -> list[str]:
        """The tasks that exist."""
        return [t["title"] for t in lines(world)]

    # In code mode the tools are top-level async functions.
    plain = LOOP.replace("tools.create_task(", "await create_task(").replace("tools.list_tasks()", "await list_tasks()")
    cells: list[dict[str, Any]] = [{"code": "BROKEN = True\n" + plain},
                                   {"code": "BROKEN = False\n" + plain, "retry": True}]
    returned: list[str] = []

    def turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        returned[:] = [str(p.content) for p in returns]
        if len(returns) < len(cells):
            [run_code] = info.function_tools
            assert run_code.parameters_json_schema["properties"]["retry"]["type"] == "boolean"
            return ModelResponse(parts=[ToolCallPart("run_code", cells[len(returns)])])
        return ModelResponse(parts=[TextPart("done")])

    toolset = FunctionToolset[None]([create_task, list_tasks])
    code_mode = CellgateCodeMode(toolset, session_options={"notebook": tmp_path / "run.ipynb", "cwd": tmp_path})
    asyncio.run(Agent(FunctionModel(turn), toolsets=[code_mode]).run("make ten tasks"))
    failed, retried = returned
    assert "RuntimeError: the 8th task's title could not be built" in failed
    told_the_seven(failed, "call run_code again with retry: true")
    assert retried.startswith("10 made; 10 exist\n") and "7 answered from the record" in retried
    assert [t["title"] for t in lines(world)] == [f"task {i}" for i in range(10)]


def test_deepagents_python_tool_retries_a_failed_cell(tmp_path: Path, world: Path, runsc: object) -> None:
    with SyncSession(tools=[str(tmp_path / "tasks.py")], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as box:
        tool = python_tool(box)
        assert tool.tool_call_schema.model_json_schema()["properties"]["retry"]["type"] == "boolean"  # type: ignore[union-attr]
        failed = tool.invoke({"code": FAILING})  # a failed cell is an error ToolMessage's text (handle_tool_error)
        told_the_seven(failed, "call python again with retry: true")
        with pytest.raises(ValidationError, match="retry"):  # a strict boolean: nothing ran
            tool.invoke({"code": "1", "retry": "yes"})
        retried = tool.invoke({"code": FIXED, "retry": True})
        assert retried.startswith("10 made; 10 exist\n") and "7 answered from the record" in retried
        refused = tool.invoke({"code": FIXED, "retry": True})
        assert refused.startswith("python with retry: true was refused, nothing ran: ")
    assert len(lines(world)) == 10
