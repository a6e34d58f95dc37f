"""pydantic-ai's code mode on cellgate (docs/integrations/pydantic_ai.md): the page's example, run with a scripted
model (pydantic-ai's FunctionModel) in the real gVisor sandbox, through the Northwind task."""

from __future__ import annotations

import asyncio
import re
import sys
import types
from pathlib import Path
from typing import Any

import nbformat
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "pydantic_ai.md"

NORTHWIND = '''
orders = await list_orders(month="2026-10")
late = [o for o in orders if o["carrier"] == "NorthPost" and o["days_late"] > 5]
await asyncio.gather(*(create_task(order_id=o["order_id"], kind="follow_up") for o in late))
print(len(orders), len(late))
'''


def page_example() -> dict[str, Any]:
    """The page's complete example (its first python block), as a module's namespace."""
    blocks = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), re.M | re.S)
    module = types.ModuleType("pydantic_ai_example")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(blocks[0], str(PAGE), "exec", dont_inherit=True), module.__dict__)
    return module.__dict__


def scripted(*cells: str) -> tuple[FunctionModel, list[str]]:
    """A model that runs each cell with run_code in turn, then answers with the last output it was given."""
    returned: list[str] = []

    def turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        returned[:] = [str(p.content) for p in returns]
        if len(returns) < len(cells):
            assert [t.name for t in info.function_tools] == ["run_code"], "code mode shows the model one tool"
            return ModelResponse(parts=[ToolCallPart("run_code", {"code": cells[len(returns)]})])
        return ModelResponse(parts=[TextPart(returned[-1].strip())])

    return FunctionModel(turn), returned


def recorded_calls(notebook: Path) -> list[dict[str, Any]]:
    cells = nbformat.read(notebook, as_version=4).cells
    return [call for cell in cells for call in cell.metadata.get("cellgate", {}).get("calls", [])]


def test_the_page_example_runs_northwind_through_the_gate(tmp_path: Path) -> None:
    model, _ = scripted(NORTHWIND)
    output, desk, notebook = asyncio.run(page_example()["main"](
        model, notebook=tmp_path / "run.ipynb", cwd=tmp_path))
    assert output == "10000 312"
    assert len(desk.tasks) == 312 and {t["kind"] for t in desk.tasks} == {"follow_up"}  # ctx.deps reached them
    calls = recorded_calls(notebook)
    assert [(c["tool"], c["decision"]) for c in calls if c["tool"] == "list_orders"] == [("list_orders", "allow")]
    tasks = [c for c in calls if c["tool"] == "create_task"]
    assert len(tasks) == 312 and {c["decision"] for c in tasks} == {"allow"}
    assert sorted(c["args"]["order_id"] for c in tasks) == sorted(t["order_id"] for t in desk.tasks)


def test_a_denied_tool_is_refused_inside_run_code(tmp_path: Path) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text('[policy.tools.create_task]\ndecision = "deny"\n')
    model, returned = scripted(
        'print(len(await list_orders(month="2026-10")))',
        'try:\n    await create_task(order_id="202610-00001", kind="refund")\n'
        'except Exception as exc:\n    print("refused:", type(exc).__name__, exc)\n')
    output, desk, notebook = asyncio.run(page_example()["main"](
        model, config=config, notebook=tmp_path / "run.ipynb", cwd=tmp_path))
    assert returned[0].strip() == "10000"
    assert output.startswith("refused: ToolDenied") and "denied" in output, output
    assert desk.tasks == []  # the host function never ran
    assert [(c["tool"], c["decision"]) for c in recorded_calls(notebook)] == [
        ("list_orders", "allow"), ("create_task", "deny")]


@pytest.mark.parametrize("name", ["no tool"])
def test_a_tool_that_is_not_an_identifier_is_a_clear_error(tmp_path: Path, name: str) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.toolsets import FunctionToolset

    from cellgate.extensions.pydantic_ai import CellgateCodeMode
    from cellgate.gate import ConfigError

    toolset = FunctionToolset[None]()
    toolset.add_function(lambda: 1, name=name)
    code_mode = CellgateCodeMode(toolset, session_options={"notebook": tmp_path / "run.ipynb", "cwd": tmp_path})
    model, _ = scripted("print(1)")
    with pytest.raises(ConfigError, match="no tool"):
        asyncio.run(Agent(model, toolsets=[code_mode]).run("hi"))
