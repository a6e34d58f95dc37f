"""Which recorded answer an attached person's call gets in `cellgate replay --interactive` (ReplayGate)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from cellgate.gate._json import sha256_hex
from cellgate.gate.calls.dispatch import CallFailed
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.ops.replay import RecordedCall, RecordedCell, ReplayGate


def call(tool: str, args: Any, result: Any) -> RecordedCall:
    return RecordedCall(tool=tool, args=args, args_sha256=sha256_hex(repr(args)), ok=True, result=result, error=None)


@pytest.fixture()
def gate() -> Iterator[ReplayGate]:
    recording = [
        RecordedCell("a", "ok", None, [call("status", {}, "first cell"), call("rows", {"n": 1}, [1])]),
        RecordedCell("b", "ok", None, [call("status", {}, "second cell")]),
        RecordedCell("c", "error", None, [call("status", {}, "polled once"), call("status", {}, "polled twice")]),
        RecordedCell("d", "ok", None, [call("rows", {"n": 2}, [1, 2])]),
    ]
    replay = ReplayGate(ToolRegistry(), log=None, recording=recording, live=set())  # type: ignore[arg-type]
    for _ in recording[:3]:
        replay.new_cell()  # replay ran cells 1 to 3 and stopped at the failed third
    replay.attach()
    yield replay
    replay.close()


def answer(gate: ReplayGate, tool: str, args: Any) -> Any:
    request = SimpleNamespace(tool=tool)
    record = SimpleNamespace(args=args, args_sha256=sha256_hex(repr(args)))
    found = gate._next(request, record)  # type: ignore[arg-type]
    return found.result


def test_the_failed_cell_answers_first_in_recorded_order_then_repeats_its_last(gate: ReplayGate) -> None:
    gate.new_cell()
    assert [answer(gate, "status", {}) for _ in range(3)] == ["polled once", "polled twice", "polled twice"]
    gate.new_cell()  # a person re-running the line in a new cell starts over
    assert answer(gate, "status", {}) == "polled once"


def test_other_cells_answer_nearest_first_and_a_new_call_is_refused(gate: ReplayGate) -> None:
    gate.new_cell()
    assert answer(gate, "rows", {"n": 1}) == [1]  # only cell 1 has it
    assert answer(gate, "rows", {"n": 2}) == [1, 2]  # recorded after the failure: still an identical call
    with pytest.raises(CallFailed) as refused:
        answer(gate, "rows", {"n": 3})
    assert refused.value.kind == "divergence"
    assert "never made this call, so it was not run" in str(refused.value)
    assert '{"n": 1}, {"n": 2}' in str(refused.value) and "`--live rows --tools MODULE.py`" in str(refused.value)
