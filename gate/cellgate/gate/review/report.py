"""`cellgate report`: a self-contained, inert HTML page of a run.

The cells are rendered by nbconvert (template ``basic``) after its
``SanitizeHTML`` preprocessor: sandbox-produced HTML is cleaned by bleach,
and JavaScript, SVG and every other active MIME type are dropped. The page
carries a Content-Security-Policy that allows no script, no request and no
external resource (images only as data: URLs), so even a sanitizer bypass
could neither run nor phone home. Everything else on the page is generated
here from the notebook's metadata with every value HTML-escaped: the run's
times, a summary per outcome, decision and tool, the asked calls with their
approver and answer time, a timeline (``review.timeline``), and each cell's
calls. A long call list shows its failures and folds the rest into a
``<details>`` element (HTML, no script).
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import nbformat
from nbconvert import HTMLExporter
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbformat import ValidationError
from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]  # no stubs installed

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import write_atomically
from cellgate.gate._terminal import head_and_tail, html_text
from cellgate.gate.audit import call_summary as cs
from cellgate.gate.audit.calls_view import approver_html, calls_table, is_host_output
from cellgate.gate.audit.notebook_file import load_notebook
from cellgate.gate.review import timeline
from cellgate.gate.review.run_view import CellView, RunView, read_run
from cellgate.gate.review.show import continued_chain

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
       "frame-src 'none'; object-src 'none'; script-src 'none'; connect-src 'none'")
OPEN_CALLS = 20  # a cell with more calls shows its failures (up to this many) and folds the whole list
MAX_ROWS = 500  # rows of one call table; the rest are counted, and all are in the notebook
VALUE_CHARS = 600  # arguments and results, head and tail

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } .meta td { padding: 0 1em 0 0; vertical-align: top; }
.ok { background: #4c9a4c; } .error, .timeout, .killed, .kernel-died, .memory { background: #c44; }
.interrupted, .rejected { background: #d9a400; }
table.cellgate-calls-table, table.summary { border-collapse: collapse; font-size: .85em; margin: .5em 0 1.5em; }
table.cellgate-calls-table { width: 100%; } .side { display: flex; gap: 2em; align-items: flex-start; }
table.cellgate-calls-table td, table.cellgate-calls-table th, table.summary td, table.summary th {
  border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
table.summary td.n { text-align: right; }
.status { font-weight: bold; } .fail, .cellgate-failed { color: #b00; } .late, .cellgate-late { color: #a60; font-weight: bold; }
.badge { padding: 0 .4em; color: #fff; }
details > summary { cursor: pointer; color: #335; margin: .3em 0; }
pre, table.cellgate-calls-table code { white-space: pre-wrap; word-break: break-word; margin: 0; }
"""


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "summary") -> str:
    """A table of already-escaped cells."""
    header = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(rows_cell for rows_cell in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><tr>{header}</tr>{body}</table>'


def _td(text: str, cls: str = "") -> str:
    return f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>"


def _calls_table(calls: list[dict[str, Any]], cell: CellView) -> str:
    return calls_table(calls, ended=cell.meta.get("ended"), chars=VALUE_CHARS, max_rows=MAX_ROWS, claims=True,
                       more=f"all are in the notebook; <code>cellgate show --cell {cell.number} --calls all</code> "
                            "lists them")


def _summary_tables(calls: list[dict[str, Any]]) -> str:
    outcomes = _table(("outcome", "calls"), [[_td(html_text(cs.LABELS[k]), "fail" if cs.is_failure(k) else ""),
                                              _td(str(n), "n")] for k, n in cs.by_outcome(calls).items()])
    decisions = _table(("decision", "calls"), [[_td(html_text(k)), _td(str(n), "n")]
                                               for k, n in cs.by_decision(calls).items()])
    tools = _table(("tool", "calls", "failed", "outcomes", "time", "longest"), [
        [_td(html_text(t.tool)), _td(str(t.calls), "n"), _td(str(t.failed), "n"),
         _td(html_text(", ".join(f"{cs.LABELS[k]} {t.outcomes[k]}" for k in cs.OUTCOMES if t.outcomes[k]))),
         _td(html_text(cs.format_duration(t.total_ms / 1000)), "n"), _td(html_text(cs.format_duration(t.max_ms / 1000)), "n")]
        for t in cs.by_tool(calls)])
    return f'<h2>Calls</h2><div class="side">{outcomes}{decisions}</div>{tools}'


def _approvals(run: RunView) -> str:
    asked = [(cell, call) for cell in run.cells for call in cell.calls if cs.approval(call) is not None]
    if not asked:
        return ""
    rows = [[_td(str(cell.number)), _td(html_text(call.get("seq"))), _td(html_text(call.get("tool"))),
             _td(html_text(cs.LABELS[cs.outcome(call)]), "fail" if cs.is_failure(cs.outcome(call)) else ""),
             _td(approver_html(call)),
             _td(html_text(cs.format_time(approval.requested)) if (approval := cs.approval(call)) else "")]
            for cell, call in asked[:MAX_ROWS]]
    table = _table(("cell", "#", "tool", "outcome", "approver", "asked"), rows)
    body = table if len(asked) <= OPEN_CALLS else \
        f"<details><summary>all {len(asked)} asked calls</summary>{table}</details>"
    return f"<h2>Approvals ({len(asked)} asked)</h2>{body}"


def _cell_section(cell: CellView) -> str:
    status = html_text(cell.status)
    count = len(cell.calls)
    head = (f'<p class="status">cell {cell.number}: <span class="badge {status}">{status}</span>'
            f" · started {html_text(cs.format_time(cell.started))} · took {html_text(cs.format_duration(cell.seconds))}"
            f" · {count} gated call{'' if count == 1 else 's'}"
            + (f" · limits hit: {html_text(', '.join(cell.limits_hit))}" if cell.limits_hit else "") + "</p>")
    if cell.late_outputs:
        texts = [head_and_tail(cs.text_of(o.get("text")), VALUE_CHARS) for o in cell.late_outputs[:20]
                 if o.get("output_type") == "stream"]
        head += (f'<p class="late">late output: {len(cell.late_outputs)} output(s) printed after the cell ended by '
                 f"work it started</p>" + "".join(f"<pre>{html.escape(t)}</pre>" for t in texts))
    if not cell.calls:
        return head
    if count <= OPEN_CALLS:
        return head + _calls_table(cell.calls, cell)
    failures = [c for c in cell.calls if cs.is_failure(cs.outcome(c))]
    shown = (f"<p>{len(failures)} failed call(s)" + (f", the first {OPEN_CALLS}:" if len(failures) > OPEN_CALLS else ":")
             + "</p>" + _calls_table(failures[:OPEN_CALLS], cell)) if failures else ""
    outcomes = ", ".join(f"{cs.LABELS[k]} {n}" for k, n in cs.by_outcome(cell.calls).items())
    return (f"{head}<p>{html_text(outcomes)}</p>{shown}"
            f"<details><summary>all {count} calls of cell {cell.number}</summary>{_calls_table(cell.calls, cell)}"
            "</details>")


def _header(run: RunView, path: Path) -> str:
    meta = run.meta
    sandbox = cs.as_dict(meta.get("sandbox"))
    failed = sum(c.status != "ok" for c in run.cells)
    late_calls = sum(len(c.late_calls) for c in run.cells)
    late_outputs = sum(len(c.late_outputs) for c in run.cells)
    memory = sum(r.memory for r in run.restarts)
    rows = [("session", meta.get("session_id")),
            ("principal", run.principal or "(none: a local session)"),
            ("run", f"{cs.format_time(run.started)} to {cs.format_time(run.ended)} ({cs.format_duration(run.seconds)}; "
                    "the first cell's start to the last cell's end)"),
            ("sandbox", f"{sandbox.get('runtime', sandbox.get('isolation'))} "
                        f"{sandbox.get('runsc_version', '')} {sandbox.get('platform', '')}"),
            ("versions", meta.get("versions")),
            ("tools manifest sha256", cs.as_dict(meta.get("tools")).get("manifest_sha256")),
            ("policy sha256", cs.as_dict(meta.get("policy")).get("sha256")),
            ("totals", f"{len(run.cells)} cells ({failed} not ok), {len(run.calls)} gated calls"),
            ("markers", f"{len(run.restarts)} kernel restart(s), {memory} after the memory limit; "
                        f"{late_calls} late call(s); {late_outputs} late output(s)"),
            ("journal", cs.as_dict(meta.get("journal")).get("file")),
            *([("trace", f"{run.trace_id} (OpenTelemetry)")] if run.trace_id else [])]
    return '<table class="meta">' + "".join(f"<tr><td>{html_text(k)}</td><td>{html_text(v)}</td></tr>" for k, v in rows) \
        + "</table>"


def render(path: Path) -> str:
    nb = load_notebook(path)
    run = read_run(nb, path.name)
    body = _cells_body(path, nb, run)
    chain, problem = continued_chain(path, run)  # a kept trial's session goes on in these notebooks
    for here, view in chain:
        body += (f"<h2>The session goes on in {html_text(here.name)} ({len(view.cells)} cells)</h2>"
                 + _cells_body(here, load_notebook(here), view))
    if problem:
        body += f'<p class="problem"><b>The chain stops:</b> {html_text(problem)}</p>'
    pygments_css = HtmlFormatter().get_style_defs(".highlight")
    calls = run.calls
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="referrer" content="no-referrer"><title>cellgate run {html_text(path.name)}</title>'
            f"<style>{STYLE}{timeline.STYLE}{pygments_css}</style></head><body><h1>cellgate run: {html_text(path.name)}</h1>"
            f"{_header(run, path)}{_summary_tables(calls) if calls else ''}{_approvals(run)}"
            f"{timeline.timeline(run, html_text)}<h2>Cells</h2>{body}</body></html>\n")


def _cells_body(path: Path, nb: Any, run: RunView) -> str:
    """The HTML of a notebook's cells, each code cell followed by its calls section."""
    marker = f"CELLGATECALLS{secrets.token_hex(8)}X"
    shown = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python"}})
    sections: dict[str, str] = {}
    code = iter(run.cells)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and isinstance(cell.get("outputs"), list):
            # The host's calls output repeats what the cell's section below shows in full.
            cell = nbformat.from_dict({**cell, "outputs": [o for o in cell.outputs if not is_host_output(o)]})
        shown.cells.append(cell)
        if cell.cell_type == "code":
            sections[f"{marker}{index}END"] = _cell_section(next(code))
            shown.cells.append(nbformat.v4.new_raw_cell(f"{marker}{index}END", metadata={"format": "text/html"}))
    exporter = HTMLExporter(template_name="basic", exclude_anchor_links=True)
    exporter.register_preprocessor(SanitizeHTML(strip=True), enabled=True)
    try:
        body, _ = exporter.from_notebook_node(shown)
    except (ValidationError, ValueError, KeyError, TypeError, AttributeError) as exc:  # nbconvert validates the cells
        problem = str(getattr(exc, "message", exc)).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: its cells are not a valid notebook ({problem}); is it a cellgate audit "
                          "notebook, or was it edited? `cellgate verify` compares it with its journal") from None
    for key, section in sections.items():
        body = body.replace(key, section)
    return str(body)


def write_report(path: Path, output: Path) -> Path:
    write_atomically(output, render(path))
    return output


__all__ = ["CSP", "render", "write_report"]
