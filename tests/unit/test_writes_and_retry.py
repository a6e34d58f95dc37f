"""A cell's writes by outcome (calls.writes), a retry's memory of its chain (calls.retry) and effects (calls.effects)."""

from __future__ import annotations

from typing import Any

import pytest

from cellgate.gate import ConfigError, Tool, ToolRegistry
from cellgate.gate.calls import effects
from cellgate.gate.calls.retry import CellWrites, idempotency_key, last_failed, remembered
from cellgate.gate.calls.writes import Writes, outcome


def call(seq: int, tool: str = "create", ok: bool = True, effect: str = "write", **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"seq": seq, "tool": tool, "args": {"n": seq}, "ok": ok, "effect": effect,
                             "idempotency_key": f"k{extra.pop('key', seq)}"}
    if ok:
        entry["result"] = {"id": f"T-{seq}"}
    return {**entry, **extra}


def failure(kind: str) -> dict[str, str]:
    return {"kind": kind, "message": f"it {kind}"}


@pytest.mark.parametrize(("entry", "expected"), [
    (call(1), "committed"),
    (call(1, answered_from={"seq": 0, "cell": "m"}), "answered"),
    (call(1, effect="read"), None),
    (call(1, effect="read", ok=False, error=failure("timeout"), ran=True), None),
    (call(1, ok=False, error=failure("denied")), "failed"),
    (call(1, ok=False, error=failure("failed"), ran=True), "failed"),  # the tool raised: it says it did not
    (call(1, ok=False, error=failure("timeout"), ran=True), "unknown"),
    (call(1, ok=False, error=failure("unavailable"), ran=True), "unknown"),  # its source died mid-call
    (call(1, ok=False, error=failure("unavailable")), "failed"),  # the journal refused it: it never ran
    (call(1, ok=False, error=failure("timeout")), "failed"),
    (call(1, ok=False, outcome="needs-reconciliation", error=failure("unknown")), "unknown"),  # a crash
    (call(1, ok=False, outcome="started"), "unknown"),  # still in flight
    (call(1, ok=False, error=failure("outcome_unknown")), "unknown"),  # a retry would not run it again
])
def test_each_recorded_call_has_the_outcome_the_world_may_have_seen(entry: dict[str, Any], expected: str) -> None:
    assert outcome(entry) == expected


def test_writes_lists_by_outcome_in_order_and_counts_reads() -> None:
    calls = [call(3), call(1), call(2, effect="read"), call(4, ok=False, error=failure("timeout"), ran=True),
             call(5, ok=False, error=failure("denied")), call(6, answered_from={"seq": 1, "cell": "m"})]
    writes = Writes.of(calls)
    assert [w.seq for w in writes.committed] == [1, 3] and writes.reads == 1
    assert [w.result_id for w in writes.committed] == ["T-1", "T-3"]
    assert [w.seq for w in writes.unknown] == [4] and [w.seq for w in writes.failed] == [5]
    assert [(w.seq, w.answered_from) for w in writes.answered] == [(6, 1)]
    assert [w.seq for w in writes.done] == [1, 3, 6]
    assert writes.as_dict()["committed"][0] == {"seq": 1, "tool": "create", "args": {"n": 1},
                                                "outcome": "committed", "result_id": "T-1"}
    text = writes.summary(failed_cell=True, retry_hint="call it with retry: true")
    assert text.splitlines()[0] == "Writes: 2 committed, 1 answered from the record, 1 failed, 1 unknown; 1 read."
    assert "  #1 create(n=1) -> id T-1" in text and "call it with retry: true" in text
    assert "#4 create(n=4): it timeout" in text
    # A cell that succeeded says what it did, without the retry advice; a cell with no write says nothing.
    assert "retry" not in writes.summary(failed_cell=False)
    assert Writes.of([call(1, effect="read")]).summary(failed_cell=True) == "" and not Writes.of([])


def test_a_long_list_is_cut_and_counted() -> None:
    text = Writes.of([call(n) for n in range(1, 31)]).summary(failed_cell=False)
    assert "#20 create" in text and "#21 create" not in text and "and 10 more" in text


def test_the_key_is_stable_and_each_part_of_it_counts() -> None:
    key = idempotency_key("L", "chain", "t", "sha", 0)
    assert key == idempotency_key("L", "chain", "t", "sha", 0) and key.startswith("cg1-") and len(key) == 44
    others = {idempotency_key(*parts) for parts in (("M", "chain", "t", "sha", 0), ("L", "other", "t", "sha", 0),
                                                   ("L", "chain", "u", "sha", 0), ("L", "chain", "t", "sha2", 0),
                                                   ("L", "chain", "t", "sha", 1))}
    assert len(others) == 5 and key not in others
    writes = CellWrites(chain="chain")
    assert [writes.key("L", "t", "sha") for _ in range(2)] == [idempotency_key("L", "chain", "t", "sha", n)
                                                               for n in (0, 1)]
    assert writes.key("L", "t", "other") == idempotency_key("L", "chain", "t", "other", 0)


def test_a_chain_remembers_committed_keys_and_unknown_ones_until_a_run_settles_them() -> None:
    first = [call(1), call(2, ok=False, error=failure("timeout"), ran=True), call(3, effect="read"),
             call(4, ok=False, error=failure("timeout"), ran=True), call(5, ok=False, error=failure("denied"))]
    # The retry: 1 answered, 2 rerun under its key and committed, 4 rerun and failed (the tool said so).
    second = [call(6, key=1, answered_from={"seq": 1, "cell": "a"}), call(7, key=2),
              call(8, key=4, ok=False, error=failure("failed"), ran=True)]
    memory = remembered([("a", first), ("b", second)])
    assert {k: (r.known, r.call["seq"], r.cell) for k, r in memory.items()} == {
        "k1": ("committed", 1, "a"), "k2": ("committed", 7, "b")}
    # An unknown one stays unknown through a retry that would not run it.
    kept = remembered([("a", first), ("b", [call(9, key=4, ok=False, error=failure("outcome_unknown"))])])
    assert (kept["k4"].known, kept["k4"].call["seq"]) == ("unknown", 4)
    assert CellWrites(chain="a", record=memory).recorded("k1") is None  # not a retry: nothing is answered
    assert CellWrites(chain="a", record=memory, retry=True).recorded("k1") is memory["k1"]


class Cell:
    def __init__(self, status: str | None, kind: str = "code", silent: bool = False) -> None:
        self.status, self.kind, self.silent, self.msg_id, self.extra = status, kind, silent, status, {}


def test_only_a_failed_last_program_cell_can_be_retried() -> None:
    assert last_failed([]) is None
    assert last_failed([Cell("error"), Cell("ok")]) is None
    error = Cell("error")
    assert last_failed([Cell("ok"), error, Cell("ok", kind="markdown"), Cell("ok", silent=True)]) is error
    assert last_failed([error, Cell("rejected")]) is None  # a refused retry leaves nothing new to retry
    assert last_failed([Cell("timeout")]) is not None and last_failed([Cell(None)]) is None


def test_effects_come_from_the_policy_first_then_the_tool_then_the_default() -> None:
    def read() -> int:
        return 1

    plain = Tool.from_function(read)
    assert plain.effective_effect() == ("write", "default")
    marked = Tool.from_function(Tool.with_effect("read")(read))
    assert (marked.effect, marked.effective_effect()) == ("read", ("read", "the tool's code"))
    assert marked.effective_effect("write") == ("write", "policy")  # the operator's word wins
    hinted = Tool(name="s.q", description="", parameters={}, function=read, effect="read",
                  effect_from="the server's hint")
    assert hinted.effective_effect() == ("read", "the server's hint")
    assert hinted.effective_effect("write") == ("write", "policy")
    registry = ToolRegistry([marked, Tool.from_function(read, name="other")])
    registry.with_policy_effects({"other": "idempotent"}.get)
    assert [e["effect"] for e in registry.manifest()] == ["idempotent", "read"]
    assert registry.get("other") is not None and registry.get("other").effect_from == "policy"  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", ["delete", "", None, 1])
def test_an_effect_that_is_not_one_of_the_three_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"effect .* is not one of 'read', 'write', 'idempotent'"):
        effects.checked(bad, "tool 't'")
    if isinstance(bad, str):
        with pytest.raises(ConfigError, match="Tool.with_effect"):
            Tool.with_effect(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("tampered", [
    {"seq": "7", "tool": "t", "ok": False, "error": {"kind": ["timeout"], "message": "m"}, "ran": True},
    {"seq": None, "tool": None, "ok": True, "args": [1], "result": {"id": ["x"]}, "answered_from": {"seq": "1"}},
    {"seq": 1.5, "ok": False, "error": "not a dict", "outcome": ["unknown"]},
])
def test_a_tampered_record_is_sorted_without_raising(tampered: dict[str, Any]) -> None:
    writes = Writes.of([tampered, call(2)])  # a notebook or journal read back is hostile: listed, never a crash
    assert [w.seq for w in writes.committed][-1] == 2
    assert remembered([("a", [tampered, call(2)])])["k2"].known == "committed"
