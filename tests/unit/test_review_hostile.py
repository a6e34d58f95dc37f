"""`cellgate show` (terminal and --json) and `cellgate report` of a notebook someone edited: every field of the wrong
type reads as unknown and is shown escaped, never a traceback; a notebook that cannot be read is a clear error."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import cellgate
from rich.console import Console

from cellgate.gate._errors import ConfigError
from cellgate.gate.review.report import render
from cellgate.gate.review.show import show
from cellgate.gate.review.show_json import json_view

WRONG = [None, 7, "text", [1, 2], {"a": 1}, True, -1.5, "9" * 300]


def notebook(folder: Path, cells: list[dict[str, Any]], meta: Any = None) -> Path:
    path = folder / "run.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": cells,
                                "metadata": {"cellgate": meta if meta is not None else {"session_id": "s"}}}))
    return path


IDS = itertools.count()


def code(meta: Any, source: Any = "print(1)") -> dict[str, Any]:
    return {"id": f"c{next(IDS)}", "cell_type": "code", "source": source, "outputs": [], "execution_count": None,
            "metadata": {"cellgate": meta}}


def wrong_metadata() -> list[dict[str, Any]]:
    """Cells (valid as nbformat cells) and calls whose every cellgate field, in turn, has each wrong type."""
    call_keys = ("seq", "tool", "args", "decision", "rule", "ok", "started", "duration_ms", "error", "approval",
                 "claimed", "outcome", "result", "result_preview")
    cell_keys = ("status", "started", "ended", "calls", "error", "late_outputs", "limits_hit", "kind")
    cells = [code({key: wrong}) for key in cell_keys for wrong in WRONG]
    cells += [code({"status": "ok", "calls": [{key: wrong} for key in call_keys for wrong in WRONG]})]
    cells += [code({"calls": [wrong, {"approval": {"approver": wrong, "requested": wrong, "answered": wrong}},
                              {"error": {"kind": wrong, "message": wrong}}]}) for wrong in WRONG]
    cells += [{"id": f"m{next(IDS)}", "cell_type": "markdown", "source": "x",
               "metadata": {"cellgate": {"kind": "kernel-restarted", "reason": wrong, "variables_gone": wrong}}}
              for wrong in WRONG]
    return cells


META = {"session_id": ["x"], "sandbox": "gvisor", "agent": {"usage": 7, "turns": "many"}, "journal": 3}


def views(path: Path) -> tuple[str, dict[str, Any]]:
    out = io.StringIO()
    show(path, Console(file=out, width=200), calls=None)
    data = json_view(path, calls=None)
    json.dumps(data, allow_nan=False)  # plain JSON: no NaN, no object a script cannot read
    return out.getvalue(), data


def test_every_cellgate_field_of_the_wrong_type_is_shown_as_unknown(tmp_path: Path) -> None:
    path = notebook(tmp_path, wrong_metadata(), META)
    text, data = views(path)
    assert "totals:" in text and data["totals"]["calls"] == sum(len(c["calls"]) for c in data["cells"])
    page = render(path)
    assert "<script" not in page and "</html>" in page


def test_cells_that_are_not_cells_still_show_and_report_says_what_is_wrong(tmp_path: Path) -> None:
    for wrong in WRONG:
        for cells in ([code({}, source=wrong)], [wrong]):
            path = notebook(tmp_path, cells, META)
            views(path)  # the terminal and JSON views read what they can
            if isinstance(wrong, str) and isinstance(cells[0], dict):  # a string source: a valid notebook
                continue
            with pytest.raises(ConfigError, match="not a readable notebook|its cells are not a valid notebook"):
                render(path)


@pytest.mark.parametrize(("text", "expected"), [
    ("[" * 100_000, "nested too deeply"),
    ('{"nbformat": 4, "cells": {}}', "not the JSON of an nbformat 4 notebook"),
    ('{"nbformat": 4, "cells": [], "metadata": {}}', "has no cellgate metadata"),
    ("\xff not utf-8", "not a readable notebook"),
])
def test_an_unreadable_notebook_is_a_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "run.ipynb"
    path.write_bytes(text.encode("latin-1"))
    for view in (lambda: show(path, Console(file=io.StringIO())), lambda: json_view(path)):
        with pytest.raises(ConfigError, match=expected):
            view()


def test_the_cli_says_what_is_wrong_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "run.ipynb"
    path.write_text("[" * 100_000)
    for args in (["show"], ["show", "--json"], ["report", "-o", str(tmp_path / "x.html")]):
        done = cellgate(*args, str(path), timeout=60)
        said = " ".join(done.stderr.split())
        assert done.returncode == 2 and "not a readable notebook" in said and "Traceback" not in said, said


def test_an_exception_without_a_message_is_shown_by_its_name_alone(tmp_path: Path) -> None:
    cell = {"cell_type": "code", "source": "while True: pass", "outputs": [], "execution_count": 1,
            "metadata": {"cellgate": {"status": "timeout", "error": {"ename": "KeyboardInterrupt", "evalue": ""}}}}
    console = Console(file=io.StringIO(), width=120, highlight=False)
    show(notebook(tmp_path, [cell]), console, cell=1)
    lines = [line.rstrip() for line in console.file.getvalue().splitlines()]
    assert "  raised KeyboardInterrupt" in lines, lines
