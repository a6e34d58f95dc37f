"""Each integration's code tool offers ``retry``, and what the model reads of a failed cell names its writes
(pure functions and tool definitions; no sandbox)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_core import ValidationError

from cellgate.extensions.anthropic.prompt import EXECUTE_PYTHON, system_prompt
from cellgate.extensions.anthropic.view import cell_view
from cellgate.extensions.claude_agent_sdk import server
from cellgate.extensions.langgraph import binding, deepagents
from cellgate.extensions.pydantic_ai import toolset
from cellgate.extensions.smolagents import executor
from cellgate.gate import CellResult
from cellgate.gate.calls.writes import Write, Writes

DESCRIPTION = ("true: this cell retries the last failed cell: writes it already made are answered from the record, "
               "not repeated; false runs everything again")
ERROR = {"output_type": "error", "ename": "RuntimeError", "evalue": "the 8th failed", "traceback": []}


def made(n: int, outcome: Any = "committed", answered_from: int | None = None) -> Write:
    return Write(seq=n, tool="create_task", args={"title": f"task {n}"}, outcome=outcome, result_id=f"T-{n}",
                 answered_from=answered_from)


def cell(status: str, writes: Writes, printed: str = "") -> CellResult:
    outputs: list[dict[str, Any]] = [{"output_type": "stream", "name": "stdout", "text": printed}] if printed else []
    if status == "error":
        outputs.append(ERROR)
    return CellResult(status=status, outputs=outputs, calls=[], execution_count=1, limits_hit=[],
                      error={"ename": "RuntimeError", "evalue": "the 8th failed"} if status == "error" else None,
                      writes=writes)


FAILED = cell("error", Writes(committed=(made(1), made(2))), printed="x" * 5000)
RETRIED = cell("ok", Writes(committed=(made(3),), answered=(made(4, "answered", 1),)), printed="done\n")
PLAIN_OK = cell("ok", Writes(committed=(made(1),)), printed="done\n")


@pytest.mark.parametrize("schema", [EXECUTE_PYTHON["input_schema"], server.SCHEMA])
def test_the_execute_python_tools_offer_an_optional_boolean_retry(schema: dict[str, Any]) -> None:
    assert schema["properties"]["retry"] == {"type": "boolean", "default": False, "description": DESCRIPTION}
    assert schema["required"] == ["code"]


def test_the_system_prompt_says_how_to_retry() -> None:
    assert "retry: true" in system_prompt([], [], search_threshold=5)


def test_the_tool_result_names_a_failed_cells_writes_after_its_output_and_outside_the_budget() -> None:
    [block] = cell_view(FAILED, "nb", 1000, 0, retry_hint="call execute_python again with retry: true")
    seen = block["text"]
    assert "characters dropped" in seen and seen.index("RuntimeError") < seen.index("Writes: 2 committed")
    assert '#2 create_task(title="task 2") -> id T-2' in seen
    assert "fix the code and call execute_python again with retry: true" in seen
    [answered] = cell_view(RETRIED, "nb", 1000, 0)
    assert answered["text"].startswith("done\n\nWrites: 1 committed, 1 answered from the record")
    assert cell_view(PLAIN_OK, "nb", 1000, 0)[0]["text"] == "done\n"  # an ok cell's writes are its output's news


def test_the_claude_agent_sdk_answer_names_the_writes_and_how_to_retry() -> None:
    answer = server.content(FAILED)
    [block] = answer["content"]
    assert answer["is_error"] and "fix the code and call execute_python again with retry: true" in block["text"]
    assert server.content(PLAIN_OK)["content"][0]["text"] == "done\n"


def test_pydantic_ais_run_code_takes_retry_as_a_strict_boolean() -> None:
    assert toolset._CODE_ARGS.validate_python({"code": "1", "retry": True}) == {"code": "1", "retry": True}
    assert toolset._CODE_ARGS.validate_python({"code": "1"}) == {"code": "1"}
    with pytest.raises(ValidationError):
        toolset._CODE_ARGS.validate_python({"code": "1", "retry": "yes"})
    assert toolset.RETRY_DESCRIPTION == DESCRIPTION


def test_deepagents_python_tool_offers_retry() -> None:
    schema = deepagents.PythonInput.model_json_schema()
    assert schema["properties"]["retry"]["type"] == "boolean" and schema["required"] == ["code"]
    assert schema["properties"]["retry"]["description"] == DESCRIPTION


def test_agents_that_cannot_retry_are_told_a_rerun_repeats_the_writes() -> None:
    for text in (binding.cell_text(FAILED), executor.writes_text(FAILED)):
        assert "Writes: 2 committed" in text and "retry: true" not in text
        assert "runs every write again: make only the writes not listed as done" in text
    hinted = binding.cell_text(FAILED, "call python again with retry: true")
    assert "fix the code and call python again with retry: true" in hinted
    assert binding.cell_text(PLAIN_OK) == "done\n"
