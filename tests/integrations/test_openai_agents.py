"""The OpenAI Agents SDK's sandbox on cellgate (docs/integrations/openai_agents.md): the page's example run with the
SDK's ScriptedModel in the real gVisor sandbox, through the Northwind task; the sandbox session's exec, read, write
and persist/hydrate."""

from __future__ import annotations

import asyncio
import io
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import nbformat
from agents import RunConfig, Runner
from agents.run_config import SandboxRunConfig
from agents.sandbox import SandboxAgent
from agents.sandbox.capabilities import Shell
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from cellgate.extensions.openai_agents import CellgateSandboxClient

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "openai_agents.md"


def page_example() -> dict[str, Any]:
    """The page's complete example (its first python block), as a module's namespace."""
    blocks = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), re.M | re.S)
    module = types.ModuleType("openai_agents_example")
    sys.modules[module.__name__] = module
    exec(compile(blocks[0], str(PAGE), "exec", dont_inherit=True), module.__dict__)
    return module.__dict__


def outputs(call: ModelCall) -> dict[str, str]:
    """The tool outputs the model was given, by call id."""
    items = call.input if isinstance(call.input, list) else []
    return {str(i["call_id"]): str(i["output"]) for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"}


def recorded_calls(notebook: Path) -> list[dict[str, Any]]:
    cells = nbformat.read(notebook, as_version=4).cells
    return [call for cell in cells for call in cell.metadata.get("cellgate", {}).get("calls", [])]


def northwind_model() -> ScriptedModel:
    """Lists October's orders, opens a follow-up for each late NorthPost one, answers with the counts."""
    def follow_up(call: ModelCall) -> ModelStep:
        orders = json.loads(outputs(call)["orders"])
        late = [o for o in orders if o["carrier"] == "NorthPost" and o["days_late"] > 5]
        return ModelStep(output=[function_call("create_task", {"order_id": o["order_id"], "kind": "follow_up"},
                                               call_id=f"task-{n}") for n, o in enumerate(late)])

    def answer(call: ModelCall) -> ModelStep:
        given = outputs(call)
        orders = len(json.loads(given["orders"]))
        opened = [json.loads(v) for k, v in given.items() if k.startswith("task-")]
        return ModelStep(output=[assistant_message(f"{orders} {len(opened)}")])

    return ScriptedModel([[function_call("list_orders", {"month": "2026-10"}, call_id="orders")],
                          ModelStep.respond(follow_up), ModelStep.respond(answer)])


def test_the_page_example_runs_northwind_through_the_gate(tmp_path: Path) -> None:
    model = northwind_model()
    answer, notebook = asyncio.run(page_example()["main"](model, notebook=tmp_path / "run.ipynb", cwd=tmp_path))
    assert answer == "10000 312"
    model.assert_complete()
    calls = recorded_calls(notebook)
    assert [(c["tool"], c["decision"]) for c in calls if c["tool"] == "list_orders"] == [("list_orders", "allow")]
    tasks = [c for c in calls if c["tool"] == "create_task"]
    assert len(tasks) == 312 and {c["decision"] for c in tasks} == {"allow"}
    assert {c["args"]["kind"] for c in tasks} == {"follow_up"}


def test_a_denied_tool_is_refused_inside_the_run(tmp_path: Path) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text('[policy.tools.create_task]\ndecision = "deny"\n')
    ran: list[str] = []

    def create_task(order_id: str, kind: str) -> dict[str, str]:
        """Open a task.

        Args:
            order_id: The order.
            kind: What to do.
        """
        ran.append(order_id)
        return {"order_id": order_id}

    model = ScriptedModel([
        [function_call("create_task", {"order_id": "202610-00001", "kind": "refund"}, call_id="task")],
        ModelStep.respond(lambda call: [assistant_message(outputs(call)["task"])]),
    ])
    client = CellgateSandboxClient(tools=[create_task], config=config, notebook=tmp_path / "run.ipynb", cwd=tmp_path)
    agent = SandboxAgent(name="northwind", model=model, capabilities=[client.capability()])
    result = asyncio.run(Runner.run(agent, "Refund order 1.", run_config=RunConfig(
        sandbox=SandboxRunConfig(client=client))))
    assert result.final_output.startswith("ToolDenied: ") and "denied" in result.final_output, result.final_output
    assert ran == []  # the host function never ran
    assert [(c["tool"], c["decision"]) for c in recorded_calls(client.sessions[-1].notebook_path)] == [
        ("create_task", "deny")]


def test_exec_through_the_shell_tool_is_a_recorded_command(tmp_path: Path) -> None:
    model = ScriptedModel([
        [function_call("exec_command", {"cmd": "echo hi; exit 3"}, call_id="sh")],
        ModelStep.respond(lambda call: [assistant_message(outputs(call)["sh"])]),
    ])
    client = CellgateSandboxClient(notebook=tmp_path / "run.ipynb", cwd=tmp_path)
    agent = SandboxAgent(name="shell", model=model, capabilities=[Shell()])
    result = asyncio.run(Runner.run(agent, "Say hi.", run_config=RunConfig(sandbox=SandboxRunConfig(client=client))))
    assert "hi" in result.final_output and "Process exited with code 3" in result.final_output, result.final_output
    cells = nbformat.read(client.sessions[-1].notebook_path, as_version=4).cells
    commands = [c.metadata.cellgate for c in cells if c.metadata.get("cellgate", {}).get("kind") == "command"]
    assert any("echo hi; exit 3" in " ".join(c.get("argv", [])) for c in commands), commands


def test_write_read_persist_and_hydrate_the_workspace(tmp_path: Path) -> None:
    async def scenario() -> tuple[bytes, bytes, bool]:
        client = CellgateSandboxClient(cwd=tmp_path)
        first = await client.create()
        async with first:
            await first.write(Path("notes/hello.txt"), io.BytesIO(b"hello from the host\n"))
            read = (await first.read(Path("notes/hello.txt"))).read()
            archive = (await first.persist_workspace()).read()
        second = await client.create()
        async with second:
            before = await second.exec("test", "-e", "notes/hello.txt", shell=False)
            await second.hydrate_workspace(io.BytesIO(archive))
            restored = (await second.read(Path("/workspace/notes/hello.txt"))).read()
        return read, restored, before.ok()

    read, restored, there_before = asyncio.run(scenario())
    assert read == restored == b"hello from the host\n"
    assert not there_before  # a new session's workspace is empty: the file came back from the archive
