"""The fast encoders (issue 33). The canonical one writes exactly what ``canonical_json`` writes, or leaves it
to json; the wire's bytes decode to the same value; the notebook's layout is json's ``indent=1``.

Every digest and hash chain already written is over json's spelling, so the faster encoder may only ever
produce the same text; where orjson would spell a value otherwise (floats in exponent form or in [1e-5, 1e-4),
NaN) or accept what json refuses, the value goes the slow way and json decides, as before.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import random
import struct

import pytest

from cellgate.gate._json import canonical_json, canonical_json_fast, canonical_text, json_bytes, notebook_json

TRICKY = [
    1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 1.5e-5, 9.999e-05, 3.14159e-05, 1e-7, 123456789012345678.0, 1e22,
    5e-324, 1.7976931348623157e308, -0.0, 0.1, 2.5, -1234.5, 2**63 - 1, -(2**63), 2**64, 10**30, True, False, None,
    "".join(chr(i) for i in range(0x80)) + "\u2028\u2029é😀\ufeff", "null", "0.00001", "1e5", "re-order the e-mail 1e-3 e5 x2e", {"1e5": "e-1"},
    {"b": 1, "a": {"é": 1, "z": [1, 2.5], "A": None}, "😀": 1, "\uffff": 2},
    [{"id": i, "amount": i * 1.25, "note": "x" * 40} for i in range(200)], (1, 2, "three"), {}, [], "",
    {1: "a", 2.5: "b"},  # json writes non-string keys as strings; orjson refuses them, so json does it
]


@pytest.mark.parametrize("value", TRICKY, ids=[repr(v)[:40] for v in TRICKY])
def test_the_fast_encoder_writes_exactly_what_json_writes(value: object) -> None:
    assert canonical_json_fast(value) == canonical_json(value)


def test_random_doubles_are_spelled_as_json_spells_them() -> None:
    draw = random.Random(33)
    for _ in range(50_000):  # every bit pattern's share of exponents
        value = struct.unpack("d", draw.randbytes(8))[0]
        if math.isfinite(value):
            assert canonical_json_fast([value, {"v": value}]) == canonical_json([value, {"v": value}])
    for _ in range(100):  # and the decades where json and orjson choose between plain and exponent form
        for exponent in range(-30, 30):
            value = draw.uniform(1, 10) * 10.0 ** exponent
            assert canonical_json_fast(value) == canonical_json(value), value


@dataclasses.dataclass
class Point:
    x: int


class Colour(str, enum.Enum):
    RED = "red"


def test_a_subclass_of_str_is_written_by_json() -> None:
    assert canonical_json_fast({"c": Colour.RED}) == canonical_json({"c": Colour.RED}) == '{"c":"red"}'


@pytest.mark.parametrize("value", [float("nan"), [1, float("inf")], Point(1), datetime.date(2026, 1, 1),
                                   {"k": {1, 2}}, b"bytes"])
def test_what_json_refuses_is_still_refused(value: object) -> None:
    with pytest.raises((TypeError, ValueError)) as expected:
        canonical_json(value)
    with pytest.raises(expected.type):
        canonical_json_fast(value)


def test_ordinary_records_take_the_fast_way() -> None:
    """The point of it: records of strings, integers and plain floats are never sent json's way; only the
    spellings that can differ are."""
    import orjson

    from cellgate.gate._json import _spelled_otherwise

    rows = [{"id": i, "customer": "ALFKI", "carrier": "NorthPost", "amount": 1234.5 + i, "note": "x" * 40}
            for i in range(2000)]
    assert not _spelled_otherwise(orjson.dumps(rows, option=orjson.OPT_SORT_KEYS))
    assert _spelled_otherwise(b'[{"a":1e-05}]') and _spelled_otherwise(b'[null]') and _spelled_otherwise(b"[0.00001]")


@pytest.mark.parametrize("value", [v for v in TRICKY if v != {1: "a", 2.5: "b"}], ids=lambda v: repr(v)[:40])
def test_the_wire_bytes_decode_to_the_value_itself(value: object) -> None:
    """What the kernel decodes (``json_bytes``, not always json's spelling) is the same value."""
    assert json.loads(json_bytes(value)) == json.loads(canonical_json(value))
    assert canonical_text(value, json_bytes(value)) == canonical_json(value)


@pytest.mark.parametrize("value", [float("nan"), [1, float("inf")], {"a": [None, float("-inf")]}])
def test_a_nan_never_reaches_the_wire_as_null(value: object) -> None:
    with pytest.raises(ValueError):  # json refuses it, as before: the call fails as "not JSON"
        json_bytes(value)


def test_the_notebook_layout_is_jsons_indent_of_one() -> None:
    draw = random.Random(29)
    alphabet = [chr(i) for i in range(0x250)] + ["\u2028", "\u2029", "\U0001F600", "\ufeff", "\x7f", "\n", '"', "\\"]
    for _ in range(2000):
        text = "".join(draw.choice(alphabet) for _ in range(draw.randint(0, 24)))
        value = {"cells": [{"source": [text, text], "metadata": {"cellgate": {text: [], "calls": [{}, {"a": 1}]}},
                            "outputs": [{"n": [1, -2, 3.5, True, False, None, 0.1, 2**63 - 1]}]}], text: {"deep": [[[[]]]]}}
        assert notebook_json(value) == json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)
    assert notebook_json({"big": 2**70}) == json.dumps({"big": 2**70}, indent=1)  # orjson refuses it: json writes it
