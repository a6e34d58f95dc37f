"""`cellgate report` of a run with every kind of call and marker (``review_runs.mixed_run``, scripted times): the
run's and cells' times, approvers and answer times, the summary counts, the timeline's axis, labels and markers,
and long call lists folded, all as inert, escaped HTML."""

from __future__ import annotations

import html.parser
import re

import pytest
from review_runs import mixed_run

from cellgate.gate.review.report import CSP, render


class Page(html.parser.HTMLParser):
    """The text of each element with a class, the <details> summaries, and every tag name."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.summaries: list[str] = []
        self.rows: list[list[str]] = []  # every table row's cells, as text
        self._summary = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "summary":
            self._summary = True
            self.summaries.append("")
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary":
            self._summary = False
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._summary:
            self.summaries[-1] += data
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Page]:
    text = render(mixed_run(tmp_path_factory.mktemp("report")))
    parsed = Page()
    parsed.feed(text)
    return text, parsed


def test_the_run_and_each_cell_have_their_times(page: tuple[str, Page]) -> None:
    text, parsed = page
    assert ["run", "2026-12-01 09:00:01.000 UTC to 2026-12-01 09:00:22.000 UTC (21.00 s; the first cell's start to "
            "the last cell's end)"] in parsed.rows
    assert "cell 2: <span class=\"badge ok\">ok</span> · started 2026-12-01 09:00:02.000 UTC · took 2.75 s" in text
    assert "cell 8: <span class=\"badge timeout\">timeout</span> · started 2026-12-01 09:00:11.000 UTC · took 3.00 s" \
        in text


def test_asked_calls_name_their_approver_and_answer_time(page: tuple[str, Page]) -> None:
    _, parsed = page
    assert ["2", "3", "issue_token", "approved",
            "queue:ada answered 2026-12-01 09:00:04.500 UTC (2.50 s after the request) checked the amount",
            "2026-12-01 09:00:02.000 UTC"] in parsed.rows
    assert ["3", "4", "charge", "denied by approver",
            "queue:bob answered 2026-12-01 09:00:07.250 UTC (1.25 s after the request) not on a Friday",
            "2026-12-01 09:00:06.000 UTC"] in parsed.rows


def test_summary_counts_per_outcome_decision_and_tool(page: tuple[str, Page]) -> None:
    _, parsed = page
    for row in (["allowed", "24"], ["approved", "1"], ["denied by rule", "1"], ["denied by approver", "1"],
                ["invalid arguments", "3"], ["tool error", "1"], ["timed out", "2"],  # outcomes
                ["allow", "27"], ["invalid", "3"], ["deny", "1"],  # decisions: invalid is not deny
                ["echo", "25", "2", "allowed 23, invalid arguments 2", "38.0 ms", "1.96 ms"],
                ["slow", "2", "2", "timed out 2", "4.81 s", "3.80 s"]):
        assert row in parsed.rows, row
    assert ["markers", "2 kernel restart(s), 1 after the memory limit; 1 late call(s); 1 late output(s)"] in parsed.rows


def test_the_timeline_has_an_axis_cell_labels_and_markers(page: tuple[str, Page]) -> None:
    text, _ = page
    timeline = text[text.index("<h2>Timeline</h2>"):text.index("<h2>Cells</h2>")]
    assert [f"+{n} s" for n in (0, 5, 10, 15, 20)] == re.findall(r'class="tl-tick"[^>]*>([^<]*)<', timeline)
    assert re.findall(r'<div class="tl-label">(cell \d+|<span[^>]*>restart</span>)</div>', timeline) == [
        *(f"cell {n}" for n in range(1, 9)), '<span class="tl-restart ">restart</span>', "cell 9",
        '<span class="tl-restart tl-memory">restart</span>', "cell 10", "cell 11"]
    assert "&#x21bb; kernel restarted (frontend)" in timeline and "&#x21bb; kernel restarted (memory)" in timeline
    assert "&#x25c6; 1 late call</span>" in timeline and "&#x25c6; 1 late output</span>" in timeline
    # cell 2 runs from +1 s to +3.75 s of the run's 21 s
    assert 'class="tl-bar ok" style="left:4.76%;width:13.10%"' in timeline


def test_long_call_lists_fold_and_late_calls_are_marked(page: tuple[str, Page]) -> None:
    text, parsed = page
    assert parsed.summaries == ["all 24 calls of cell 10"]
    cell10 = text[text.index("cell 10: <span"):]
    assert "<p>2 failed call(s):</p>" in cell10  # the failures stay open above the fold
    assert 'late: finished after its cell ended' in text


def test_the_page_is_inert_and_every_value_escaped(page: tuple[str, Page]) -> None:
    text, parsed = page
    assert f'content="{CSP}"' in text and "script" not in parsed.tags
    assert "x\\u202eevil\\u001b[2Jyyy" in text and "\u202e" not in text and "\x1b" not in text
    assert "characters elided" in text


def test_the_principal_an_mcp_session_acted_for_is_shown(tmp_path) -> None:
    import json

    from cellgate.gate.review.show_json import json_view

    path = mixed_run(tmp_path)
    nb = json.loads(path.read_text())
    assert "principal" not in nb["metadata"]["cellgate"]
    assert ["principal", "(none: a local session)"] in _rows(render(path))
    nb["metadata"]["cellgate"]["principal"] = {"name": "alice<b>", "issuer": "static-token"}
    path.write_text(json.dumps(nb))
    assert ["principal", "alice<b> (static-token)"] in _rows(render(path))
    assert json_view(path)["session"]["principal"] == "alice<b> (static-token)"


def _rows(text: str) -> list[list[str]]:
    parsed = Page()
    parsed.feed(text)
    return parsed.rows
