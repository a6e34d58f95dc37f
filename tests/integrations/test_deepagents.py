"""A deepagents agent on CellgateSandbox and python_tool, in the real gVisor sandbox, driven by LangChain's fake
chat model (GenericFakeChatModel: scripted tool calls, in order)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest
from deepagents import create_deep_agent
from frameworks import ANSWER, DENY_TASKS, LATE, PROGRAM, session_options, tally
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

from cellgate.extensions.langgraph import CellgateSandbox, python_tool
from cellgate.gate import SyncSession

pytestmark = [pytest.mark.gvisor, pytest.mark.xdist_group("deepagents")]

SCRIPT = "/workspace/late_orders.py"


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's fake chat model, told the agent's tools (it calls them as scripted, so it needs none)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def calls(*steps: tuple[str, dict[str, Any]] | str) -> ScriptedChatModel:
    replies = [AIMessage(content=step) if isinstance(step, str) else
               AIMessage(content="", tool_calls=[{"name": step[0], "args": step[1], "id": f"call-{n}"}])
               for n, step in enumerate(steps)]
    return ScriptedChatModel(messages=iter(replies))


def tool_results(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.name: m for m in state["messages"] if isinstance(m, ToolMessage)}


def test_deep_agent_writes_runs_and_answers_northwind_through_the_gate(runsc: object, tmp_path: Path,
                                                                       northwind: ModuleType) -> None:
    model = calls(("write_file", {"file_path": SCRIPT, "content": PROGRAM}),
                  ("execute", {"command": f"wc -l < {SCRIPT}; exit 3"}),
                  ("python", {"code": f"exec(open({SCRIPT!r}).read())"}),
                  ANSWER)
    with SyncSession(tools=[northwind.list_orders, northwind.create_task], **session_options(tmp_path)) as box:
        backend = CellgateSandbox(box)
        agent = create_deep_agent(model=model, tools=[python_tool(box)], backend=backend)
        state = agent.invoke({"messages": [{"role": "user", "content": "Follow up October's late NorthPost orders."}]})
        [script, missing] = backend.download_files([SCRIPT, "/workspace/nothing-here.txt"])
        notebook = box.notebook_path
    results = tool_results(state)
    assert results["python"].status == "success" and results["python"].content == f"{ANSWER}\n"
    assert state["messages"][-1].content == ANSWER
    # execute is a command in the sandbox: its output and exit code reach the model.
    newlines = PROGRAM.count("\n")  # what wc -l counts
    assert str(results["execute"].content).startswith(f"{newlines}\n") and "exit code 3" in results["execute"].content
    assert results["execute"].artifact["exit_code"] == 3
    # write_file went in by upload; download_files brings the same bytes back, and names what it could not.
    assert script.content == PROGRAM.encode() and script.error is None
    assert missing.content is None and missing.error and "nothing-here.txt" in missing.error
    assert tally(notebook) == {("list_orders", "allow"): 1, ("create_task", "allow"): LATE}
    cells = nbformat.read(notebook, as_version=4).cells
    kinds = [c.metadata.get("cellgate", {}).get("kind") for c in cells]
    assert "command" in kinds  # each shell command is a recorded cell


def test_a_denied_tool_is_an_error_tool_message_and_a_denial_in_the_record(runsc: object, tmp_path: Path,
                                                                           northwind: ModuleType) -> None:
    tasks_before = len(northwind._tasks)
    model = calls(("python", {"code": "print(tools.create_task('202610-00001', 'follow_up'))"}),
                  "The task was refused.")
    with SyncSession(tools=[northwind.list_orders, northwind.create_task],
                     **session_options(tmp_path, DENY_TASKS)) as box:
        agent = create_deep_agent(model=model, tools=[python_tool(box)], backend=CellgateSandbox(box))
        state = agent.invoke({"messages": [{"role": "user", "content": "Open a follow-up for 202610-00001."}]})
        notebook = box.notebook_path
    denied = tool_results(state)["python"]
    assert denied.status == "error" and "ToolDenied" in str(denied.content)
    assert tally(notebook) == {("create_task", "deny"): 1}
    assert len(northwind._tasks) == tasks_before


def test_the_docs_example_answers_northwind(runsc: object, tmp_path: Path, example: Any) -> None:
    model = calls(("write_file", {"file_path": SCRIPT, "content": PROGRAM}),
                  ("python", {"code": f"exec(open({SCRIPT!r}).read())"}), ANSWER)
    answer, notebook = example("deepagents_agent").run(model, tmp_path / "run.ipynb")
    assert answer == ANSWER
    assert tally(notebook) == {("list_orders", "allow"): 1, ("create_task", "allow"): LATE}
