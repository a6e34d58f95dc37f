"""langgraph-codeact's create_codeact with CodeActEval, in the real gVisor sandbox, driven by LangChain's fake
chat model (GenericFakeChatModel: the scripted replies, in order)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest
from frameworks import ANSWER, DENY_TASKS, LATE, PLAIN_PROGRAM, session_options, tally
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph_codeact import create_codeact

from cellgate.extensions.langgraph import CodeActEval
from cellgate.gate import SyncSession

pytestmark = [pytest.mark.gvisor, pytest.mark.xdist_group("langgraph-codeact")]


def script(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=reply) for reply in replies]))


def fenced(code: str) -> str:
    return f"Counting in the sandbox.\n\n```python\n{code}\n```"


def sandbox_outputs(state: dict[str, object]) -> list[str]:
    """What the sandbox node handed back to the model (codeact adds it as a user message)."""
    return [str(m.content) for m in state["messages"] if isinstance(m, HumanMessage)][1:]  # type: ignore[attr-defined]


def test_codeact_answers_northwind_with_every_call_gated(runsc: object, tmp_path: Path,
                                                         northwind: ModuleType) -> None:
    model = script(fenced(PLAIN_PROGRAM), f"Of {ANSWER.split()[0]} orders, {LATE} were late: {ANSWER}")
    tools = [northwind.list_orders, northwind.create_task]
    with SyncSession(tools=tools, **session_options(tmp_path)) as box:
        agent = create_codeact(model, tools, CodeActEval(box)).compile()
        state = agent.invoke({"messages": [{"role": "user", "content": "Follow up October's late NorthPost orders."}]})
        notebook = box.notebook_path
    assert sandbox_outputs(state) == [f"{ANSWER}\n"]
    assert str(state["messages"][-1].content).endswith(ANSWER)
    assert tally(notebook) == {("list_orders", "allow"): 1, ("create_task", "allow"): LATE}
    sources = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells)
    assert "random.Random" not in sources and "list_orders = tools.list_orders" in sources  # names, never code


def test_a_denied_tool_is_an_error_in_the_graph_and_a_denial_in_the_record(runsc: object, tmp_path: Path,
                                                                           northwind: ModuleType) -> None:
    tasks_before = len(northwind._tasks)
    model = script(fenced("print(create_task('202610-00001', 'follow_up'))"), "The task was refused.")
    tools = [northwind.list_orders, northwind.create_task]
    with SyncSession(tools=tools, **session_options(tmp_path, DENY_TASKS)) as box:
        agent = create_codeact(model, tools, CodeActEval(box)).compile()
        state = agent.invoke({"messages": [{"role": "user", "content": "Open a follow-up for 202610-00001."}]})
        notebook = box.notebook_path
    [output] = sandbox_outputs(state)
    assert output.startswith("ToolDenied: ") and "create_task" in output  # what the model reads next
    assert tally(notebook) == {("create_task", "deny"): 1}
    assert len(northwind._tasks) == tasks_before


def test_the_docs_example_answers_northwind(runsc: object, tmp_path: Path, example: Any) -> None:
    model = script(fenced(PLAIN_PROGRAM), ANSWER)
    answer, notebook = example("codeact_agent").run(model, tmp_path / "run.ipynb")
    assert answer == ANSWER
    assert tally(notebook) == {("list_orders", "allow"): 1, ("create_task", "allow"): LATE}
    outputs = [o.get("text") for c in nbformat.read(notebook, as_version=4).cells for o in c.outputs]
    assert f"{ANSWER}\n" in outputs  # what the model was shown, as the record has it


def test_tools_the_session_lacks_are_added_from_the_graphs_context(runsc: object, tmp_path: Path,
                                                                   northwind: ModuleType) -> None:
    model = script(fenced(PLAIN_PROGRAM), ANSWER)
    with SyncSession(**session_options(tmp_path)) as box:  # no tools: create_codeact's are added at the first step
        agent = create_codeact(model, [northwind.list_orders, northwind.create_task], CodeActEval(box)).compile()
        state = agent.invoke({"messages": [{"role": "user", "content": "Follow up October's late NorthPost orders."}]})
        assert sorted(t["name"] for t in box.session.manifest) == ["create_task", "list_orders"]
        notebook = box.notebook_path
    assert sandbox_outputs(state) == [f"{ANSWER}\n"]
    assert tally(notebook) == {("list_orders", "allow"): 1, ("create_task", "allow"): LATE}


def test_after_the_session_restarts_the_kernel_the_names_are_bound_again(runsc: object, tmp_path: Path,
                                                                         northwind: ModuleType) -> None:
    # Forked copies of the kernel together pass the sandbox's memory limit: the session restarts the kernel.
    hog = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    model = script(fenced(hog), fenced(PLAIN_PROGRAM), ANSWER)
    tools = [northwind.list_orders, northwind.create_task]
    with SyncSession(tools=tools, memory_mb=512, cell_timeout=60.0, **session_options(tmp_path)) as box:
        agent = create_codeact(model, tools, CodeActEval(box)).compile()
        state = agent.invoke({"messages": [{"role": "user", "content": "Follow up October's late NorthPost orders."}]})
    first, second = sandbox_outputs(state)
    assert first.startswith("SandboxMemoryLimit: ")
    assert second == f"{ANSWER}\n"
