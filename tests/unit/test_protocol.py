"""The strict parser for everything that arrives from the sandbox."""

from __future__ import annotations

import pytest

from cellgate.gate.calls.protocol import CallRequest, ProtocolError, batch_items, parse_call, strict_loads
from cellgate.kernel.runtime import _batches
from cellgate.kernel.wire import MAX_BATCH_CALLS, MAX_REQUEST_BYTES


@pytest.mark.parametrize("text", [
    '{"path": "ok.txt", "path": "/etc/passwd"}',
    '{"x": NaN}', '{"x": Infinity}', '[' * 200_000 + ']' * 200_000,
    '{"x": 1' + '0' * 10_000 + '}', '{"x": "\\ud800', "not json",
])
def test_strict_loads_rejects(text: str) -> None:
    with pytest.raises(ProtocolError):
        strict_loads(text)


def test_strict_loads_accepts_ordinary_json() -> None:
    assert strict_loads(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert strict_loads('"[{not nesting}]"') == "[{not nesting}]"


def test_parse_call() -> None:
    data = {"op": "call", "id": "ab" * 8, "tool": "list_orders", "args": {"month": "2026-10"}, "cell": "m1",
            "thread": "MainThread"}
    assert parse_call(data, 100) == CallRequest("ab" * 8, "list_orders", {"month": "2026-10"}, cell="m1",
                                                thread="MainThread")


@pytest.mark.parametrize(("data", "size", "fragment"), [
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": {}}, 2 << 20, "exceeds"),
    ({"op": "run", "id": "ab" * 8, "tool": "t", "args": {}}, 10, "unknown op"),
    ({"op": "call", "id": "AB" * 8, "tool": "t", "args": {}}, 10, "hex"),
    ({"op": "call", "id": "ab" * 8, "tool": "t;rm", "args": {}}, 10, "not a valid tool name"),
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": []}, 10, "must be a JSON object"),
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": {}, "as": "root"}, 10, "unknown request fields"),
    ("call", 10, "must be a JSON object"),
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": {}}, 10, "names no cell"),
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": {}, "cell": "m1", "thread": 7}, 10, "thread"),
])
def test_parse_call_rejects(data: object, size: int, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        parse_call(data, size)


def test_batch_items_hands_back_each_call_to_parse_on_its_own() -> None:
    call = {"op": "call", "id": "ab" * 8, "tool": "echo", "args": {}}
    assert batch_items(call, 100) is None
    assert batch_items({"op": "batch", "calls": [call, "junk"]}, 100) == [call, "junk"]


@pytest.mark.parametrize(("data", "size", "fragment"), [
    ({"op": "batch", "calls": []}, 10, "1 to 64 calls, got 0"),
    ({"op": "batch", "calls": [{}] * 65}, 10, "1 to 64 calls, got 65"),
    ({"op": "batch", "calls": {"a": 1}}, 10, "got dict"),
    ({"op": "batch", "calls": [{}], "as": "root"}, 10, "exactly the fields"),
    ({"op": "batch", "calls": [{}]}, 2 << 20, "exceeds"),
])
def test_batch_items_rejects(data: object, size: int, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        batch_items(data, size)


def test_the_runtime_groups_queued_calls_within_the_message_limits() -> None:
    small = [({"id": str(i)}, 100) for i in range(MAX_BATCH_CALLS + 1)]
    assert [len(group) for group in _batches(small)] == [MAX_BATCH_CALLS, 1]
    half = MAX_REQUEST_BYTES // 2
    big = [({"id": "a"}, half), ({"id": "b"}, half), ({"id": "c"}, 10)]
    assert [[r["id"] for r in group] for group in _batches(big)] == [["a"], ["b", "c"]]
