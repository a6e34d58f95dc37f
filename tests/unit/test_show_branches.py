"""`cellgate show` of a session that was forked, tried, paused and resumed: the record's notes of its branches are
listed in their place among the cells, each saying where its branch went (issue 43, items 2 and 4).

The notebooks are made by the reducer from journal records, as the recorder makes them (no sandbox)."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

import nbformat
from rich.console import Console

from cellgate.gate.audit.reducer import LIVE_EVENTS, Reducer, live_note
from cellgate.gate.review.run_view import NOTE_KINDS
from cellgate.gate.review.show import show
from cellgate.gate.review.show_json import json_view

TIME = "2026-12-07T06:00:00.000Z"


def journal(*events: dict[str, Any]) -> list[dict[str, Any]]:
    seq = itertools.count(1)
    return [{"seq": next(seq), "hash": "h", "time": TIME, **event} for event in events]


def cell(msg_id: str, source: str) -> list[dict[str, Any]]:
    return [{"event": "cell-sent", "msg_id": msg_id, "source": source},
            {"event": "cell-ended", "msg_id": msg_id, "status": "ok"}]


def write(path: Path, records: list[dict[str, Any]], **metadata: Any) -> Path:
    reducer = Reducer()
    reducer.apply({"seq": 0, "hash": "h", "time": TIME, "event": "session-started",
                   "metadata": {"session_id": path.stem, **metadata}})
    for record in records:
        reducer.apply(record)
    nbformat.write(reducer.notebook(path.stem + ".journal.jsonl"), str(path))
    return path


def shown(path: Path) -> str:
    out = io.StringIO()
    show(path, Console(file=out, width=200))
    return out.getvalue()


def lines_with(text: str, *words: str) -> list[int]:
    """The line numbers of the first line that has each of ``words``."""
    lines = text.splitlines()
    return [next(i for i, line in enumerate(lines) if word in line) for word in words]


def test_show_lists_a_trials_notes_in_order_with_where_each_branch_went(tmp_path: Path) -> None:
    # cellgate exec --trial load.py bad.py good.py: a discarded trial, then a kept one; the run goes on in the fork
    parent = write(tmp_path / "tr.ipynb", journal(
        *cell("a", "load = 1"),
        {"event": "session-forked", "forks": 1, "checkpoint": "c1"},
        {"event": "trial-discarded", "notebook": "tr.fork-1.ipynb", "status": "error"},
        *cell("b", "between = 2"),
        {"event": "session-forked", "forks": 1, "checkpoint": "c2"},
        {"event": "trial-kept", "notebook": "tr.fork-2.ipynb", "status": "ok"},
        {"event": "session-ended", "continued_in": "tr.fork-2.ipynb"}))
    write(tmp_path / "tr.fork-1.ipynb", [], forked_from={"notebook": str(parent), "checkpoint": "c1", "fork": 1, "of": 1})
    write(tmp_path / "tr.fork-2.ipynb", journal({"event": "session-continued", "continued_from": "tr.ipynb",
                                                 "status": "ok"}, *cell("c", "good = 3")),
          forked_from={"notebook": str(parent), "checkpoint": "c2", "fork": 1, "of": 1})
    text = shown(parent)
    order = lines_with(text, "load = 1", "tr.fork-1.ipynb", "discarded", "between = 2", "tr.fork-2.ipynb",
                       "trial kept", "goes on")
    assert order == sorted(order), text
    assert "into 1 session (" in text and "1 sessions" not in text
    forks = [line for line in text.splitlines() if "forks:" in line]
    assert [f.split("forks:")[1].strip() for f in forks] == ["tr.fork-1.ipynb", "tr.fork-2.ipynb"], text
    assert "goes on in tr.fork-2.ipynb" in text.replace("`", "")

    data = json_view(parent)
    assert [(n["kind"], n["after_cell"], n["notebooks"]) for n in data["notes"]] == [
        ("session-forked", 1, ["tr.fork-1.ipynb"]), ("trial-discarded", 1, ["tr.fork-1.ipynb"]),
        ("session-forked", 2, ["tr.fork-2.ipynb"]), ("trial-kept", 2, ["tr.fork-2.ipynb"]),
        ("session-ended", 2, ["tr.fork-2.ipynb"])]
    json.dumps(data)

    child = shown(tmp_path / "tr.fork-2.ipynb")
    assert "forked from tr.ipynb (fork 1 of 1)" in child
    assert lines_with(child, "continued", "good = 3") == sorted(lines_with(child, "continued", "good = 3"))
    assert "tr.ipynb" in child.split("continued", 1)[1]


def test_show_lists_pause_and_resume_among_the_cells(tmp_path: Path) -> None:
    path = write(tmp_path / "p.ipynb", journal(
        *cell("a", "x = 1"), {"event": "session-paused", "checkpoint": "c1"},
        {"event": "session-resumed", "checkpoint": "c1"}, *cell("b", "y = x")))
    text = shown(path)
    order = lines_with(text, "x = 1", "paused", "resumed", "y = x")
    assert order == sorted(order), text


def test_a_fork_into_several_sessions_says_sessions(tmp_path: Path) -> None:
    [record] = journal({"event": "session-forked", "forks": 3, "checkpoint": "c"})
    assert "into 3 sessions" in live_note(record)
    [record] = journal({"event": "session-forked", "forks": 1, "checkpoint": "c"})
    assert "into 1 session (" in live_note(record)


def test_show_knows_every_note_the_reducer_writes() -> None:
    # show reads the notebook without importing the reducer (nbformat): its list of note kinds is kept equal here
    assert set(NOTE_KINDS) == {*LIVE_EVENTS, "session-ended"}


def test_a_tampered_note_is_shown_as_text_and_its_wrong_fields_as_unknown(tmp_path: Path) -> None:
    path = tmp_path / "t.ipynb"
    notes = [{"id": f"m{i}", "cell_type": "markdown", "source": "\x1b[2J\x1b]52;c;aGk=\x07 forked",
              "metadata": {"cellgate": {"kind": kind, "checkpoint": wrong, "forks": wrong, "notebook": wrong}}}
             for i, (kind, wrong) in enumerate((k, w) for k in NOTE_KINDS for w in (None, 7, [1], {"a": 1}, True))]
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": notes,
                                "metadata": {"cellgate": {"session_id": "s", "forked_from": {"fork": "x"}}}}))
    (tmp_path / "other.ipynb").write_text("{not json")  # a notebook beside it that cannot be read is passed over
    text = shown(path)
    assert "\x1b" not in text and "\x07" not in text
    data = json_view(path)
    assert len(data["notes"]) == len(notes) and all(n["forks"] in (None, 7) and n["notebooks"] == [] for n in data["notes"])
    assert "\x1b" not in json.dumps(data, ensure_ascii=False)
