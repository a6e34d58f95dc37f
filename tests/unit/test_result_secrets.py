"""``split_secrets`` on a tool's result: a value without a ``Secret`` is handed on as it is (nothing rebuilt: a
1 MB result is the common case), one with a secret anywhere is split as before, and a cycle never hangs the walk."""

from __future__ import annotations

import pytest

from cellgate.gate.calls.record import Secret, holds_secret, secrets_exist, split_secrets

pytestmark = pytest.mark.unit


def digest(value: str) -> str:
    return f"<digest of {len(value)} chars>"


def test_a_result_without_a_secret_is_handed_on_as_it_is() -> None:
    rows = [{"id": i, "email": f"c{i}@example.com", "tags": ("a", "b"), "paid": None} for i in range(1000)]
    found: list[str] = []
    plain, shown = split_secrets(rows, found, digest)
    assert plain is rows and shown is rows and found == []


def test_a_secret_anywhere_is_found_and_split() -> None:
    deep = {"rows": [{"id": 1, "notes": ("ok", {"key": Secret("s3cr3t")})}], "count": 1}
    assert holds_secret(deep) and holds_secret(Secret("x")) and not holds_secret({"a": ["s3cr3t"]})
    found: list[str] = []
    plain, shown = split_secrets(deep, found, digest)
    assert found == ["s3cr3t"]
    assert plain == {"rows": [{"id": 1, "notes": ["ok", {"key": "s3cr3t"}]}], "count": 1}
    assert type(plain["rows"][0]["notes"][1]["key"]) is str  # the sandbox gets a plain str
    assert shown == {"rows": [{"id": 1, "notes": ["ok", {"key": "<digest of 6 chars>"}]}], "count": 1}


def test_a_cycle_or_a_shared_part_is_walked_once() -> None:
    shared = {"k": "v"}
    cyclic: list[object] = [shared, shared]
    cyclic.append(cyclic)
    assert holds_secret(cyclic) is False  # returns; the JSON conversion after it refuses the cycle
    cyclic.append({"s": Secret("x")})
    assert holds_secret(cyclic) is True


def test_a_secret_is_counted_from_its_making_until_it_goes_and_with_none_nothing_is_looked_through() -> None:
    import gc

    from cellgate.gate.calls import record

    gc.collect()
    before = record._alive[0]  # other tests of this process may hold some
    value = Secret("s3cr3t")
    assert record._alive[0] == before + 1 and secrets_exist()
    assert split_secrets({"a": [value]}, [], lambda s: "digest")[1] == {"a": ["digest"]}
    del value
    gc.collect()
    assert record._alive[0] == before
    record._alive[0], kept = 0, record._alive[0]  # as in a process that never made one
    try:
        result = {"a": [1, 2]}
        assert split_secrets(result, [], lambda s: "digest") == (result, result)
    finally:
        record._alive[0] += kept
