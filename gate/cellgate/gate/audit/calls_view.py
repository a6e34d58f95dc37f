"""The calls of a cell as an output every notebook viewer renders, authored by the host.

Each recorded code cell that made calls gets one more output, written by the
host from the journal (never by the kernel): a ``display_data`` whose bundle
holds the calls as recorded (``application/vnd.cellgate.calls+json``, for a
renderer that knows it), a static table (``text/html``) and a compact summary
(``text/plain``), so JupyterLab, VS Code, GitHub and nbviewer show the calls
with no extension. Its metadata says who wrote it: ``cellgate.authored_by =
"host"``. The kernel cannot forge it: ``sanitize`` removes cellgate's MIME
types and metadata keys from every kernel output, and the HTML the kernel
sends loses its ``class`` attributes, so ``cellgate-calls`` is the host's.

The HTML is built from escaped values only (``visible`` shows control and
bidi characters as escapes) and then passed through a strict allowlist: no
script, no style, no link, no external resource.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from typing import Any

import nh3

from cellgate.gate.audit import call_summary as cs
from cellgate.gate.calls.redaction import visible

CALLS_MIME = "application/vnd.cellgate.calls+json"
HOST_MARK = {"authored_by": "host"}
FULL_TABLE_UP_TO = 20  # larger cells: a summary and the failures first, every call in <details>
MAX_ROWS = 1000  # rows in one table; the bundle and metadata.cellgate keep every call
ARGS_CHARS = 200
RESULT_CHARS = 200

_TAGS = {"div", "p", "b", "br", "code", "small", "table", "thead", "tbody", "tr", "th", "td", "details", "summary"}
_CLEANER = nh3.Cleaner(tags=_TAGS, attributes={"*": {"class", "title"}}, url_schemes=set(), strip_comments=True)


def is_host_output(output: Any) -> bool:
    """The calls output the host wrote (kernel outputs never carry this mark: sanitize removes it)."""
    metadata = output.get("metadata") if isinstance(output, dict) else None
    mark = metadata.get("cellgate") if isinstance(metadata, dict) else None
    return isinstance(mark, dict) and mark.get("authored_by") == "host"


def outcome(call: dict[str, Any]) -> str:
    """What happened to the call, in words (``call_summary.outcome``: a failed validation is invalid, not deny)."""
    return cs.LABELS[cs.outcome(call)]


def is_ok(call: dict[str, Any]) -> bool:
    return not cs.is_failure(cs.outcome(call))


def summary(calls: list[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
    """(tool, decision, outcome) -> number of calls, in order of first appearance."""
    return dict(Counter((str(c.get("tool")), cs.decision(c), outcome(c)) for c in calls))


def _trim(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = visible(text)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _esc(value: Any, limit: int = 200) -> str:
    return html.escape(_trim(value, limit), quote=True)


def _approver(call: dict[str, Any]) -> str:
    approval = call.get("approval")
    if not isinstance(approval, dict):
        return ""
    answered = approval.get("answered")
    return str(approval.get("approver") or "") + (f" at {answered}" if answered else " (no answer)")


def _result(call: dict[str, Any]) -> Any:
    error = call.get("error")
    if isinstance(error, dict):
        return error.get("message", "")
    return call.get("result", call.get("result_preview", ""))


def _time(call: dict[str, Any]) -> str:
    started = str(call.get("started") or "")
    clock = started.split("T")[-1] if "T" in started else started
    duration = call.get("duration_ms")
    took = f"{duration:.1f} ms" if isinstance(duration, (int, float)) else str(duration or "")
    return f"{clock} · {took}" if took else clock


def _row(call: dict[str, Any]) -> str:
    state = outcome(call)
    rule = call.get("rule")
    return (f'<tr class="cellgate-call-{_esc(cs.outcome(call), 40)}"><td>{_esc(call.get("seq"), 20)}</td>'
            f"<td><code>{_esc(call.get('tool'), 100)}</code></td><td><code>{_esc(call.get('args'), ARGS_CHARS)}"
            f"</code></td><td>{_esc(cs.decision(call), 40)}"
            + (f"<br><small>rule {_esc(rule, 100)}</small>" if rule else "")
            + f"</td><td>{_esc(_approver(call), 120)}</td><td><b>{_esc(state, 40)}</b></td>"
            f"<td><code>{_esc(_result(call), RESULT_CHARS)}</code></td><td>{_esc(_time(call), 60)}</td></tr>")


def _table(calls: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("#", "tool", "arguments", "decision", "approver", "outcome",
                                            "result / error", "time"))
    more = len(calls) - MAX_ROWS
    return (f'<table class="cellgate-calls-table"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(_row(c) for c in calls[:MAX_ROWS]) + "</tbody></table>"
            + (f"<p>… and {more} more calls (all of them in this output's {CALLS_MIME} data and in the "
               "cell's metadata.cellgate.calls)</p>" if more > 0 else ""))


def _summary_table(calls: list[dict[str, Any]]) -> str:
    rows = "".join(f"<tr><td><code>{_esc(tool, 100)}</code></td><td>{_esc(decision, 40)}</td>"
                   f"<td>{_esc(state, 40)}</td><td>{count}</td></tr>"
                   for (tool, decision, state), count in sorted(summary(calls).items()))
    return ('<table class="cellgate-calls-summary"><thead><tr><th>tool</th><th>decision</th><th>outcome</th>'
            f"<th>calls</th></tr></thead><tbody>{rows}</tbody></table>")


def _headline(calls: list[dict[str, Any]]) -> str:
    counts = Counter(outcome(c) for c in calls)
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: (kv[0] != "allowed", kv[0])))
    return f"cellgate recorded {len(calls)} gated call{'s' if len(calls) != 1 else ''} of this cell: {parts}"


def calls_html(calls: list[dict[str, Any]]) -> str:
    """A static table of the calls; a summary and the failures first when there are many."""
    body = f"<p><b>{html.escape(_headline(calls))}</b></p>"
    if len(calls) <= FULL_TABLE_UP_TO:
        body += _table(calls)
    else:
        failures = [c for c in calls if not is_ok(c)]
        body += _summary_table(calls)
        if failures:
            body += f"<p><b>{len(failures)} not ok</b></p>" + _table(failures)
        body += f"<details><summary>all {len(calls)} calls</summary>{_table(calls)}</details>"
    return str(_CLEANER.clean(f'<div class="cellgate-calls">{body}</div>'))


def calls_text(calls: list[dict[str, Any]]) -> str:
    lines = [_headline(calls)]
    many = len(calls) > FULL_TABLE_UP_TO
    if many:
        lines += [f"  {count} x {_trim(tool, 100)} {_trim(decision, 40)} -> {state}"
                  for (tool, decision, state), count in sorted(summary(calls).items())]
        lines.append("not ok:" if any(not is_ok(c) for c in calls) else "all ok")
    shown = [c for c in calls if not is_ok(c)] if many else calls
    for call in shown[:FULL_TABLE_UP_TO]:
        rule = f" (rule {_trim(call.get('rule'), 100)})" if call.get("rule") else ""
        lines.append(f"  #{call.get('seq')} {_trim(call.get('tool'), 100)} {_trim(cs.decision(call), 40)}{rule}"
                     f" -> {outcome(call)}" + ("" if call.get("ok") else f": {_trim(_result(call), 120)}"))
    if len(shown) > FULL_TABLE_UP_TO or len(shown) < len(calls):
        lines.append(f"  ({len(calls) - min(len(shown), FULL_TABLE_UP_TO)} more not listed here)")
    return "\n".join(lines)


def calls_output(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The host's output for a cell that made ``calls`` (as metadata.cellgate.calls lists them)."""
    return {"output_type": "display_data", "metadata": {"cellgate": dict(HOST_MARK)},
            "data": {CALLS_MIME: {"calls": calls}, "text/html": calls_html(calls), "text/plain": calls_text(calls)}}


__all__ = ["CALLS_MIME", "calls_html", "calls_output", "calls_text", "is_host_output",
           "outcome", "summary"]
