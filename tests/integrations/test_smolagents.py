"""smolagents' CodeAgent on CellgateExecutor, in the real gVisor sandbox, driven by a scripted smolagents Model."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import pytest
from frameworks import ANSWER, DENY_TASKS, LATE, PLAIN_PROGRAM, session_options, tally
from smolagents import CodeAgent, tool
from smolagents.models import ChatMessage, MessageRole, Model

from cellgate.extensions.smolagents import CellgateExecutor, PackagesUnavailable
from cellgate.gate import SyncSession

pytestmark = [pytest.mark.gvisor, pytest.mark.xdist_group("smolagents")]


class ScriptedModel(Model):
    """smolagents' Model interface: each generate() is the next scripted reply; what it was shown is kept."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(model_id="scripted")
        self.replies = list(replies)
        self.seen: list[str] = []

    def generate(self, messages: list[Any], stop_sequences: list[str] | None = None, **kwargs: Any) -> ChatMessage:
        self.seen.append("\n".join(str(m.content if hasattr(m, "content") else m.get("content")) for m in messages))
        if not self.replies:
            raise AssertionError(f"the agent asked for step {len(self.seen)}; the script has no more (the last "
                                 f"step did not end the run). It was shown:\n{self.seen[-1][-2000:]}")
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.replies.pop(0))


def code(text: str, thought: str = "Thought: next step.") -> str:
    return f"{thought}\n<code>\n{text}\n</code>"


def test_codeagent_answers_northwind_with_every_call_gated(runsc: object, tmp_path: Path,
                                                            northwind: ModuleType) -> None:
    model = ScriptedModel([
        code(PLAIN_PROGRAM),
        code("final_answer(f'{len(orders)} {len(late)}')", "Thought: the counts are printed; answer."),
    ])
    executor = CellgateExecutor(**session_options(tmp_path))  # starts its session at agent.run, with the tools
    agent = CodeAgent(tools=[tool(northwind.list_orders), tool(northwind.create_task)], model=model,
                      executor=executor, max_steps=4)
    try:
        answer = agent.run("Follow up October's late NorthPost orders; answer with the two counts.")
        notebook = executor.session.notebook_path
    finally:
        agent.cleanup()
    assert answer == ANSWER
    assert ANSWER in model.seen[-1]  # the first step's printed output reached the model
    # Every tool call went through the gate: in the record, with its decision; the answer too.
    assert tally(notebook) == {("list_orders", "allow"): 1, ("create_task", "allow"): LATE,
                               ("final_answer", "allow"): 1}
    sources = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells)
    assert "def forward" not in sources and "random.Random" not in sources  # no tool's code entered the sandbox
    assert "list_orders = tools.list_orders" in sources  # only its name, bound to the gated stub


def test_a_denied_tool_is_an_error_the_agent_sees_and_the_record_has(runsc: object, tmp_path: Path,
                                                                      northwind: ModuleType) -> None:
    tasks_before = len(northwind._tasks)
    model = ScriptedModel([
        code("task = create_task('202610-00001', 'follow_up')\nprint(task)"),
        code("final_answer('create_task is not allowed')", "Thought: the task was refused."),
    ])
    executor = CellgateExecutor(**session_options(tmp_path, DENY_TASKS))
    agent = CodeAgent(tools=[tool(northwind.list_orders), tool(northwind.create_task)], model=model,
                      executor=executor, max_steps=3)
    try:
        answer = agent.run("Open a follow-up for order 202610-00001.")
        notebook = executor.session.notebook_path
    finally:
        agent.cleanup()
    assert answer == "create_task is not allowed"
    failed = agent.memory.steps[1]
    assert failed.error is not None and "ToolDenied" in str(failed.error)  # smolagents' own error of the step
    assert "ToolDenied" in model.seen[-1]  # ... which the model was shown
    assert tally(notebook)[("create_task", "deny")] == 1
    assert len(northwind._tasks) == tasks_before  # it never ran on the host


def test_install_packages_says_what_cellgate_offers_instead(tmp_path: Path) -> None:
    with pytest.raises(PackagesUnavailable, match="no network") as raised:
        CellgateExecutor(additional_imports=["pandas"], **session_options(tmp_path))
    assert "cellgate's own Python environment" in str(raised.value) and "tool of the agent" in str(raised.value)


def test_the_docs_example_answers_northwind(runsc: object, tmp_path: Path, example: Any) -> None:
    model = ScriptedModel([code(PLAIN_PROGRAM), code("final_answer(f'{len(orders)} {len(late)}')")])
    answer, notebook = example("smolagents_agent").run(model, tmp_path / "run.ipynb")
    assert answer == ANSWER
    assert tally(notebook) == {("list_orders", "allow"): 1, ("create_task", "allow"): LATE,
                               ("final_answer", "allow"): 1}


def test_a_session_handed_in_gets_the_agents_tools_added_and_stays_open(runsc: object, tmp_path: Path,
                                                                       northwind: ModuleType) -> None:
    model = ScriptedModel([code(PLAIN_PROGRAM), code("final_answer(f'{len(orders)} {len(late)}')")])
    with SyncSession(**session_options(tmp_path)) as box:
        assert box.session.manifest == []
        agent = CodeAgent(tools=[tool(northwind.list_orders), tool(northwind.create_task)], model=model,
                          executor=CellgateExecutor(box), max_steps=4)
        assert agent.run("Follow up October's late NorthPost orders.") == ANSWER
        agent.cleanup()
        assert sorted(t["name"] for t in box.session.manifest) == ["create_task", "final_answer", "list_orders"]
        assert box.execute("print(len(late))").stdout == f"{LATE}\n"  # still open: the owner closes it
        notebook = box.notebook_path
    assert tally(notebook)[("create_task", "allow")] == LATE


def test_after_the_session_restarts_the_kernel_the_names_are_bound_again(runsc: object, tmp_path: Path,
                                                                         northwind: ModuleType) -> None:
    # Forked copies of the kernel together pass the sandbox's memory limit: the session restarts the kernel.
    hog = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    model = ScriptedModel([code(hog), code(PLAIN_PROGRAM), code("final_answer(f'{len(orders)} {len(late)}')")])
    executor = CellgateExecutor(memory_mb=512, cell_timeout=60.0, **session_options(tmp_path))
    agent = CodeAgent(tools=[tool(northwind.list_orders), tool(northwind.create_task)], model=model,
                      executor=executor, max_steps=4)
    try:
        assert agent.run("Follow up October's late NorthPost orders.") == ANSWER
    finally:
        agent.cleanup()
    assert "SandboxMemoryLimit" in str(agent.memory.steps[1].error)
