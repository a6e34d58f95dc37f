"""`cellgate report`: a self-contained, inert HTML page of a run.

The cells are rendered by nbconvert (template ``basic``) after its
``SanitizeHTML`` preprocessor: sandbox-produced HTML is cleaned by bleach,
and JavaScript, SVG and every other active MIME type are dropped. The page
carries a Content-Security-Policy that allows no script, no request and no
external resource (images only as data: URLs), so even a sanitizer bypass
could neither run nor phone home. The calls of each cell and the timeline
are generated here, with every value HTML-escaped.
"""

from __future__ import annotations

import html
import json
import secrets
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
from nbconvert import HTMLExporter
from nbconvert.preprocessors.sanitize import SanitizeHTML
from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]  # no stubs installed

from cellgate.gate._json import write_atomically
from cellgate.gate.audit.show import claims_text, load_notebook
from cellgate.gate.calls.redaction import visible

CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
       "frame-src 'none'; object-src 'none'; script-src 'none'; connect-src 'none'")

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.4em; } .meta td { padding: 0 1em 0 0; }
.timeline { position: relative; height: 2.2em; background: #f3f3f3; margin: 1em 0; }
.bar { position: absolute; top: .3em; height: 1.6em; min-width: 3px; }
.ok { background: #4c9a4c; } .error, .timeout, .killed, .kernel-died, .memory { background: #c44; }
.interrupted, .rejected { background: #d9a400; }
table.calls { border-collapse: collapse; font-size: .85em; margin: .5em 0 2em; width: 100%; }
table.calls td, table.calls th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
.status { font-weight: bold; } .fail { color: #b00; }
pre { white-space: pre-wrap; word-break: break-word; }
"""


def _esc(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return html.escape(visible(text), quote=True)


def _time(value: str | None) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _claims(call: dict[str, Any]) -> str:
    text = claims_text(call)
    return f'<br><small class="claim">{_esc(text)}</small>' if text else ""


def _calls_table(cell: Any, index: int) -> str:
    meta = cell.metadata.get("cellgate", {})
    calls = meta.get("calls", [])
    status = str(meta.get("status"))
    head = (f'<p class="status">cell {index}: <span class="{_esc(status)}" style="padding:0 .4em;color:#fff">'
            f"{_esc(status)}</span> · {len(calls)} gated call(s)"
            + (f" · limits hit: {_esc(', '.join(meta.get('limits_hit', [])))}" if meta.get("limits_hit") else "")
            + "</p>")
    if not calls:
        return head
    rows = []
    for call in calls[:500]:
        outcome = "ok" if call.get("ok") else (call.get("error") or {}).get("kind", call.get("outcome", "failed"))
        result = call.get("result", call.get("result_preview", (call.get("error") or {}).get("message", "")))
        rows.append(
            f"<tr><td>{call.get('seq')}</td><td>{_esc(call.get('tool'))}{_claims(call)}</td><td><pre>{_esc(call.get('args'))[:600]}</pre></td>"
            f"<td>{_esc(call.get('decision'))}<br><small>{_esc(call.get('rule') or '')}</small></td>"
            f"<td class=\"{'' if call.get('ok') else 'fail'}\">{_esc(outcome)}</td>"
            f"<td><pre>{_esc(result)[:600]}</pre></td><td>{float(call.get('duration_ms', 0)):.1f}</td></tr>")
    more = f"<p>… and {len(calls) - 500} more calls (all in the notebook)</p>" if len(calls) > 500 else ""
    return (head + '<table class="calls"><tr><th>#</th><th>tool</th><th>arguments</th><th>decision</th>'
            "<th>outcome</th><th>result / error</th><th>ms</th></tr>" + "".join(rows) + "</table>" + more)


def _timeline(cells: list[Any]) -> str:
    spans: list[tuple[float, float, Any]] = []
    for cell in cells:
        start, end = _time(cell.metadata.cellgate.get("started")), _time(cell.metadata.cellgate.get("ended"))
        if start is not None and end is not None:
            spans.append((start, end, cell))
    if not spans:
        return ""
    first, last = min(s for s, _, _ in spans), max(e for _, e, _ in spans)
    width = max(last - first, 1e-6)
    bars = []
    for index, (start, end, cell) in enumerate(spans, start=1):
        left, size = 100 * (start - first) / width, max(100 * (end - start) / width, 0.2)
        status = _esc(cell.metadata.cellgate.get("status"))
        bars.append(f'<div class="bar {status}" style="left:{left:.2f}%;width:{size:.2f}%" '
                    f'title="cell {index}: {status}, {end - start:.2f} s"></div>')
    return f'<h2>Timeline ({last - first:.2f} s)</h2><div class="timeline">{"".join(bars)}</div>'


def render(path: Path) -> str:
    nb = load_notebook(path)
    meta = nb.metadata.cellgate
    marker = f"CELLGATECALLS{secrets.token_hex(8)}X"
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    shown = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python"}})
    for index, cell in enumerate(nb.cells):
        shown.cells.append(cell)
        if cell.cell_type == "code":
            shown.cells.append(nbformat.v4.new_raw_cell(f"{marker}{index}END", metadata={"format": "text/html"}))
    exporter = HTMLExporter(template_name="basic", exclude_anchor_links=True)
    exporter.register_preprocessor(SanitizeHTML(strip=True), enabled=True)
    body, _ = exporter.from_notebook_node(shown)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            number = code_cells.index(cell) + 1
            body = body.replace(f"{marker}{index}END", _calls_table(cell, number))
    sandbox = meta.get("sandbox", {})
    calls = sum(len(c.metadata.cellgate.get("calls", [])) for c in code_cells)
    failed = sum(c.metadata.cellgate.get("status") != "ok" for c in code_cells)
    rows = [("session", meta.get("session_id")), ("sandbox", f"{sandbox.get('runtime', sandbox.get('isolation'))} "
             f"{sandbox.get('runsc_version', '')} {sandbox.get('platform', '')}"),
            ("versions", meta.get("versions")), ("tools manifest sha256", (meta.get("tools") or {}).get("manifest_sha256")),
            ("policy sha256", (meta.get("policy") or {}).get("sha256")),
            ("totals", f"{len(code_cells)} cells ({failed} not ok), {calls} gated calls"),
            ("journal", (meta.get("journal") or {}).get("file"))]
    header = "<table class=\"meta\">" + "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in rows) + "</table>"
    pygments_css = HtmlFormatter().get_style_defs(".highlight")
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f'<meta name="referrer" content="no-referrer"><title>cellgate run {_esc(path.name)}</title>'
            f"<style>{STYLE}{pygments_css}</style></head><body><h1>cellgate run: {_esc(path.name)}</h1>"
            f"{header}{_timeline(code_cells)}<h2>Cells</h2>{body}</body></html>\n")


def write_report(path: Path, output: Path) -> Path:
    write_atomically(output, render(path))
    return output
