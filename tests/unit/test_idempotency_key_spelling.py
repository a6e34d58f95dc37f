"""An idempotency key is a public contract: its direct spelling of the JSON must stay canonical_json's, byte for byte."""

from __future__ import annotations

import pytest

from cellgate.gate._json import canonical_json, sha256_hex
from cellgate.gate.calls.retry import KEY_PREFIX, idempotency_key

TRICKY = ["", "plain", 'quote " and \\ backslash', "new\nline\ttab\x00nul\x1f", "é 日本 \u2028\u2029 \U0001f600",
          "\x7f del", "</script>"]


def by_definition(*parts: object) -> str:
    return KEY_PREFIX + sha256_hex(canonical_json(list(parts)).encode())[:40]


def test_keys_made_before_the_direct_spelling_are_made_again() -> None:
    # Keys journalled by the first release: a gate restarted on a newer one must derive the very same.
    assert idempotency_key("0123456789abcdef0123456789abcdef", "msg-1", "create_task", "f" * 64, 2) == \
        "cg1-f010311c3f1c05b0bd1451751834dacbe0f43682"
    assert idempotency_key("L", 'é\u2028"\\\n\x00日本', "t", "sha", 0) == "cg1-f97f3439cb35ba92ecf535ca50e1d6b34819c2d3"


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("occurrence", [0, 7, 10**20])
def test_the_direct_spelling_is_canonical_json(text: str, occurrence: int) -> None:
    for parts in ((text, "chain", "tool", "sha"), ("L", text, "tool", "sha"), ("L", "chain", text, "sha"),
                  ("L", "chain", "tool", text)):
        assert idempotency_key(*parts, occurrence) == by_definition(*parts, occurrence)


def test_other_types_go_through_canonical_json() -> None:
    class Name(str):
        pass

    assert idempotency_key(Name("L"), "c", "t", "s", 0) == by_definition("L", "c", "t", "s", 0)
    assert idempotency_key("L", "c", "t", "s", True) == by_definition("L", "c", "t", "s", True)
    assert idempotency_key("L", "c", "t", "s", True) != idempotency_key("L", "c", "t", "s", 1)
