"""Outputs the writer must survive (SECURITY.md D8) and the per-cell output cap (X6)."""

from __future__ import annotations

import json

import nbformat
import pytest


@pytest.fixture(scope="module")
def capped(session_factory):
    return session_factory(output_limit_kb=64)


def test_lone_surrogates_nan_and_a_huge_string_never_break_the_writer(capped) -> None:
    cells = [
        "print('\\ud800 lone surrogate')",
        "from IPython.display import display\ndisplay({'application/json': {'x': float('nan')}}, raw=True)",
        "print('x' * (20 << 20))",
    ]
    for code in cells:
        result = capped.execute(code)
        assert result.status == "ok", result  # each cell runs to its end; only what it wrote is in question
    nb = nbformat.read(capped.session.notebook_path, as_version=4)
    nbformat.validate(nb)
    json.loads(capped.session.notebook_path.read_text(encoding="utf-8"))  # strict UTF-8, strict JSON
    assert capped.execute("print('writer still fine')").stdout == "writer still fine\n"


def test_output_over_the_limit_keeps_head_and_tail_with_a_marker(capped) -> None:
    result = capped.execute("for i in range(20000):\n    print(f'line {i:05d}', flush=(i % 500 == 0))")
    assert result.status == "ok" and "output" in result.limits_hit
    text = result.text
    assert text.startswith("line 00000\n") and text.rstrip().endswith("line 19999")
    assert "[output truncated: " in text and "bytes dropped, sha256=" in text
    assert len(text) < 70 * 1024
    nb = nbformat.read(capped.session.notebook_path, as_version=4)
    assert "output" in nb.cells[-1].metadata.cellgate.limits_hit
