"""A tool result JSON has no type for (a datetime, a set) reaches the cell converted; the call's record says where
and to what (issue 43, new-user item 10). A real Dispatcher and Recorder: the note is read from the journal."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import json
from pathlib import Path
from typing import Any

import pydantic_core

from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.record import MAX_CONVERSIONS_SAID, conversions
from cellgate.gate.calls.registry import Tool, ToolRegistry

WHEN = datetime.datetime(2026, 12, 7, 6, 0, tzinfo=datetime.UTC)


def served(tmp_path: Path, result: Any) -> tuple[Any, dict[str, Any]]:
    """What the kernel is sent for a call of a tool returning ``result``, and the call's journal record."""
    tool = Tool("report", "", {"type": "object", "properties": {}}, lambda: result)
    recorder = Recorder(tmp_path / "run.ipynb", {})
    try:
        gate = Dispatcher(ToolRegistry([tool]), log=recorder, policy=Policy.model_validate({"default": "allow"}))
        cell = recorder.cell_sent("m1", "tools.report()", False)
        scope = CallScope(cell=cell, msg_id="m1", key="m1", source="tools.report()")
        outcome = asyncio.run(gate.serve(CallRequest(id="c1", tool="report", args={}, cell="m1"), scope))
    finally:
        recorder.close()
    journal = tmp_path / "run.journal.jsonl"
    (finished,) = [r for r in map(json.loads, journal.read_text().splitlines()) if r["event"] == "call-finished"]
    return outcome.reply.result, finished["call"]


def test_a_datetime_and_a_set_arrive_as_a_string_and_a_list_and_the_record_says_so(tmp_path: Path) -> None:
    sent, call = served(tmp_path, {"when": WHEN, "tags": {"b"}, "count": 2})
    assert sent == {"when": "2026-12-07T06:00:00Z", "tags": ["b"], "count": 2}
    assert call["ok"] is True and call["converted"] == ["result.when: datetime -> str", "result.tags: set -> list"]


def test_a_result_of_json_s_own_types_has_no_note(tmp_path: Path) -> None:
    sent, call = served(tmp_path, {"when": "2026-12-07", "tags": ["b"], "nested": [{"n": 1.5, "t": (1, 2)}]})
    assert sent["when"] == "2026-12-07" and "converted" not in call


def test_the_note_names_nested_places_and_keys_and_stays_bounded() -> None:
    value = {"rows": [{"price": decimal.Decimal("1.50")}, {"at": WHEN.date()}], 7: "seven", "raw": b"x"}
    assert conversions(value, pydantic_core.to_jsonable_python(value)) == [
        "result: int keys -> str", "result.rows[0].price: Decimal -> str", "result.rows[1].at: date -> str",
        "result.raw: bytes -> str"]
    many = [WHEN] * 1000
    said = conversions(many, pydantic_core.to_jsonable_python(many))
    assert len(said) == MAX_CONVERSIONS_SAID + 1 and said[-1] == f"and {1000 - MAX_CONVERSIONS_SAID} more"
