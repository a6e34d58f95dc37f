"""The strict parser for everything that arrives from the sandbox."""

from __future__ import annotations

import pytest

from cellgate.gate.protocol import CallRequest, ProtocolError, parse_call, strict_loads


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
    data = {"op": "call", "id": "ab" * 8, "tool": "list_orders", "args": {"month": "2026-10"}}
    assert parse_call(data, 100) == CallRequest("ab" * 8, "list_orders", {"month": "2026-10"})


@pytest.mark.parametrize(("data", "size", "fragment"), [
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": {}}, 2 << 20, "exceeds"),
    ({"op": "run", "id": "ab" * 8, "tool": "t", "args": {}}, 10, "unknown op"),
    ({"op": "call", "id": "AB" * 8, "tool": "t", "args": {}}, 10, "hex"),
    ({"op": "call", "id": "ab" * 8, "tool": "t;rm", "args": {}}, 10, "not a valid tool name"),
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": []}, 10, "must be a JSON object"),
    ({"op": "call", "id": "ab" * 8, "tool": "t", "args": {}, "as": "root"}, 10, "unknown request fields"),
    ("call", 10, "must be a JSON object"),
])
def test_parse_call_rejects(data: object, size: int, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        parse_call(data, size)
