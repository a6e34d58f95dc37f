"""One text-safety module, one calls table (issue 30, item 4): a hidden character is shown as the same escape by
the notebook's calls table, `cellgate show` and `cellgate report`, and the report's calls table is the notebook's.

The run is made as cellgate makes every audit notebook (``review_runs.Script``: journal records fed to the real
``Reducer``); its tool name, arguments and result carry a tag character (U+E0041, invisible), a braille blank
(U+2800, looks like nothing) and an em space (U+2003, looks like a space). The JupyterLab extension's server
side shows them the same way (tests/unit/test_lab_live_run.py).
"""

from __future__ import annotations

import html.parser
import io
import json
from pathlib import Path

import nbformat
from review_runs import Script
from rich.console import Console

from cellgate.gate.audit.calls_view import is_host_output
from cellgate.gate.review.report import render
from cellgate.gate.review.show import show

HIDDEN = "tool\U000e0041\u2800\u2003x"
SHOWN = "tool\\U000e0041\\u2800\\u2003x"  # what every view shows of it


def hidden_run(folder: Path) -> Path:
    s = Script()
    s.record("session-started", 0, metadata={"session_id": "5e55101d0123456789abcdef01234567",
                                             "journal": {"file": "run.journal.jsonl"}})
    s.cell("tools.x()", 1.0, 0.5, [s.call(HIDDEN, {"note": HIDDEN}, 1.1, 2.5, result=HIDDEN),
                                   s.call("add", {"a": 1}, 1.2, 1.0, "deny", "tools.add.decision", "denied",
                                          f"tool '{HIDDEN}' was denied")])
    s.record("session-ended", 2.0)
    notebook = folder / "run.ipynb"
    nbformat.write(s.reducer.notebook("run.journal.jsonl"), notebook)
    return notebook


class Tables(html.parser.HTMLParser):
    """Each ``cellgate-calls-table`` of a page: its rows, each a list of its cells' text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._depth = 0  # > 0 inside a calls table
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("class", "cellgate-calls-table") in attrs:
            self.tables.append([])
            self._depth = 1
        elif tag == "table" and self._depth:
            self._depth += 1
        elif self._depth and tag == "tr":
            self.tables[-1].append([])
        elif self._depth and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._depth:
            self._depth -= 1
        elif self._depth and tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def calls_tables(page: str) -> list[list[list[str]]]:
    parsed = Tables()
    parsed.feed(page)
    return parsed.tables


def notebook_table(path: Path) -> str:
    cell = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    output = next(o for o in cell["outputs"] if is_host_output(o))
    return "".join(output["data"]["text/html"])


def shows_escaped(rows: list[list[str]], where: str) -> None:
    tool, args, result = (rows[0].index(h) for h in ("tool", "arguments", "result / error"))
    hidden_call = rows[1]
    assert hidden_call[tool].startswith(SHOWN), (where, hidden_call[tool])
    assert hidden_call[args] == f'{{"note": "{SHOWN}"}}', (where, hidden_call[args])
    assert hidden_call[result] == SHOWN, (where, hidden_call[result])
    assert f"tool '{SHOWN}' was denied" in rows[2][result], (where, rows[2][result])


def test_a_hidden_character_is_shown_as_the_same_escape_by_the_notebook_show_and_the_report(tmp_path: Path) -> None:
    path = hidden_run(tmp_path)
    [notebook] = calls_tables(notebook_table(path))
    shows_escaped(notebook, "the notebook's calls table")
    console = Console(file=io.StringIO(), record=True, width=200)
    show(path, console)
    terminal = console.export_text()
    assert f"#1 {SHOWN} decision=allow" in terminal and f'args {{"note": "{SHOWN}"}}' in terminal, terminal
    [report] = calls_tables(render(path))
    shows_escaped(report, "the report's calls table")
    for char in HIDDEN[4:7]:
        assert char not in terminal and char not in notebook_table(path) and char not in render(path), hex(ord(char))


def test_the_report_shows_the_notebooks_calls_table(tmp_path: Path) -> None:
    path = hidden_run(tmp_path)
    [notebook] = calls_tables(notebook_table(path))
    [report] = calls_tables(render(path))
    assert notebook[0] == report[0]  # one header
    tool = notebook[0].index("tool")
    for mine, theirs in zip(notebook[1:], report[1:], strict=True):
        # cell for cell the same, but the report adds the kernel's claims (labelled) under the tool's name
        assert [c for i, c in enumerate(mine) if i != tool] == [c for i, c in enumerate(theirs) if i != tool]
        assert theirs[tool].startswith(mine[tool]) and "reported by the kernel: line 1" in theirs[tool]
