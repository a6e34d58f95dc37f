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

A cell that failed after writes also gets, in the same output under its headline, a note that lists
them with their arguments by outcome (``writes_note``, from ``calls.writes``): what its failure left done in
the world, what a retry would answer from the record rather than make again.

The table (``calls_table``) is the one HTML table of calls: ``cellgate
report`` shows it too. It is built from escaped values only (``_terminal``
shows every hidden character as an escape, as ``cellgate show`` does) and
then passed through a strict allowlist: no script, no style, no link, no
external resource.
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

import nh3

from cellgate.gate._terminal import head_and_tail, html_text, value_text
from cellgate.gate.audit import call_summary as cs
from cellgate.gate.calls.writes import Writes

CALLS_MIME = "application/vnd.cellgate.calls+json"
HOST_MARK = {"authored_by": "host"}
FULL_TABLE_UP_TO = 20  # larger cells: a summary and the failures first, every call in <details>
MAX_ROWS = 1000  # rows in one table; the bundle and metadata.cellgate keep every call
VALUE_CHARS = 200  # of arguments and results, head and tail
NOTE_CHARS = 600  # of one line of the writes note (a write's line is at most ~450: tool, short arguments, error)

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


def claims_text(call: dict[str, Any]) -> str:
    """The kernel's unverified claims about a call (line, source line, thread), labelled as such."""
    claimed = cs.as_dict(call.get("claimed"))
    parts = []
    if claimed.get("line") is not None:
        parts.append(f"line {head_and_tail(str(claimed['line']), 20)}")
    if claimed.get("source_line"):
        parts.append(repr(head_and_tail(str(claimed["source_line"]), 120)))
    if claimed.get("thread"):
        parts.append(f"thread {head_and_tail(str(claimed['thread']), 60)!r}")
    return "reported by the kernel: " + ", ".join(parts) if parts else ""


def approver_html(call: dict[str, Any]) -> str:
    """Who answered a call's approval request, when and why, as HTML; '' for a call no approver was asked."""
    asked = cs.approval(call)
    if asked is None:
        return ""
    when = (f"answered {cs.format_time(asked.answered)}" if asked.answered is not None
            else f"withdrawn {cs.format_time(asked.withdrawn)}" if asked.withdrawn is not None else "no answer")
    waited = f" ({cs.format_duration(asked.waited)} after the request)" if asked.waited is not None else ""
    reason = f"<br><small>{html_text(asked.reason, 200)}</small>" if asked.reason else ""
    return f"{html_text(asked.approver, 120)} <small>{html_text(when + waited)}</small>{reason}"


def _result(call: dict[str, Any], chars: int) -> str:
    if call.get("ok") is True:
        return f"<code>{html_text(call.get('result', call.get('result_preview', '')), chars)}</code>"
    exception = cs.exception_name(call)
    named = f"<b>{html_text(exception or 'unknown', 80)}</b>: " if exception or cs.outcome(call) == "unknown" else ""
    return f"{named}<code>{html_text(cs.error_message(call), chars)}</code>"


def _failure(call: dict[str, Any]) -> Any:
    error = call.get("error")
    return error.get("message", "") if isinstance(error, dict) else call.get("result", call.get("result_preview", ""))


def _time(call: dict[str, Any]) -> str:
    took = cs.number(call.get("duration_ms"))
    return (f"{cs.format_time(cs.call_started(call), date=False)} · "
            f"{cs.format_duration(took / 1000 if took is not None else None)}")


def _row(call: dict[str, Any], ended: Any, chars: int, claims: bool) -> str:
    found = cs.outcome(call)
    rule = call.get("rule")
    claimed = claims_text(call) if claims else ""
    late = '<br><small class="cellgate-late">late: finished after its cell ended</small>' \
        if ended is not None and cs.is_late(call, ended) else ""
    return (f'<tr class="cellgate-call-{html_text(found, 40)}"><td>{html_text(call.get("seq"), 20)}</td>'
            f"<td><code>{html_text(call.get('tool'), 100)}</code>"
            + (f'<br><small class="cellgate-claim">{html.escape(claimed)}</small>' if claimed else "")
            + f"</td><td><code>{html_text(call.get('args'), chars)}</code></td><td>{html_text(cs.decision(call), 40)}"
            + (f"<br><small>rule {html_text(rule, 100)}</small>" if rule else "")
            + f"</td><td>{approver_html(call)}</td>"
            + ('<td class="cellgate-failed">' if cs.is_failure(found) else "<td>")
            + f"<b>{html_text(cs.LABELS[found], 40)}</b>{late}</td>"
            f"<td>{_result(call, chars)}</td><td>{html_text(_time(call), 60)}</td></tr>")


CALLS_HEAD = ("#", "tool", "arguments", "decision", "approver", "outcome", "result / error", "time")


def calls_table(calls: list[dict[str, Any]], *, ended: Any = None, chars: int = VALUE_CHARS, max_rows: int = MAX_ROWS,
                claims: bool = False, more: str = "") -> str:
    """The one HTML table of calls: the notebook's calls output and ``cellgate report`` both show it.

    Every value is HTML-escaped with its hidden characters shown (``_terminal.html_text``), long ones head and
    tail in ``chars``. ``ended``: the cell's end, to mark a call that finished after it; ``claims``: show the
    kernel's claims about each call; ``more``: where the calls past ``max_rows`` are."""
    head = "".join(f"<th>{h}</th>" for h in CALLS_HEAD)
    left = len(calls) - max_rows
    return (f'<table class="cellgate-calls-table"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(_row(c, ended, chars, claims) for c in calls[:max_rows]) + "</tbody></table>"
            + (f"<p>… and {left} more calls ({more})</p>" if left > 0 else ""))


def _table(calls: list[dict[str, Any]], ended: Any) -> str:
    return calls_table(calls, ended=ended, more=f"all of them in this output's {CALLS_MIME} data and in the cell's "
                                                "metadata.cellgate.calls")


def _summary_table(calls: list[dict[str, Any]]) -> str:
    rows = "".join(f"<tr><td><code>{html_text(tool, 100)}</code></td><td>{html_text(decision, 40)}</td>"
                   f"<td>{html_text(state, 40)}</td><td>{count}</td></tr>"
                   for (tool, decision, state), count in sorted(summary(calls).items()))
    return ('<table class="cellgate-calls-summary"><thead><tr><th>tool</th><th>decision</th><th>outcome</th>'
            f"<th>calls</th></tr></thead><tbody>{rows}</tbody></table>")


def _headline(calls: list[dict[str, Any]]) -> str:
    counts = Counter(outcome(c) for c in calls)
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: (kv[0] != "allowed", kv[0])))
    return f"cellgate recorded {len(calls)} gated call{'s' if len(calls) != 1 else ''} of this cell: {parts}"


def writes_note(calls: list[dict[str, Any]], status: Any) -> list[str]:
    """The lines of a failed cell's note on its writes (``Writes.summary``), unescaped; [] for a cell that ended
    ok (or has not ended) or whose every write failed (nothing in the world changed). ``calls``: the cell's
    calls, those still in flight included (their ``outcome: started`` makes them of unknown outcome)."""
    if status in (None, "ok"):
        return []
    try:
        writes = Writes.of(c for c in calls if isinstance(c, dict))
    except (TypeError, ValueError):  # a tampered record (a seq or an error kind of the wrong type): said, not fatal
        return [f"This cell ended with status {status}; its writes cannot be listed: a call of its record has a "
                "field of the wrong type (see the calls below)."]
    if not (writes.done or writes.unknown):
        return []
    head = (f"This cell ended with status {status} after writes that stay in the world (its failure did not undo "
            "them). A retry of the cell (Session.execute(code, retry=True); over MCP, retry: true) answers the "
            "committed ones from the record instead of making them again; a plain re-run repeats them.")
    return [head, *writes.summary(failed_cell=False).splitlines()]


def _note_html(note: list[str]) -> str:
    if not note:
        return ""
    head, *lines = note
    return (f'<div class="cellgate-writes"><p><b>{html_text(head, NOTE_CHARS)}</b></p><p>'
            + "<br>".join(f"<code>{html_text(line, NOTE_CHARS)}</code>" for line in lines) + "</p></div>")


def calls_html(calls: list[dict[str, Any]], ended: Any = None, note: list[str] | None = None) -> str:
    """A static table of the calls (``calls_table``); a summary and the failures first when there are many.
    ``note``: a failed cell's note on its writes (``writes_note``), under the headline."""
    body = f"<p><b>{html_text(_headline(calls))}</b></p>" + _note_html(note or [])
    if len(calls) <= FULL_TABLE_UP_TO:
        body += _table(calls, ended)
    else:
        failures = [c for c in calls if not is_ok(c)]
        body += _summary_table(calls)
        if failures:
            body += f"<p><b>{len(failures)} not ok</b></p>" + _table(failures, ended)
        body += f"<details><summary>all {len(calls)} calls</summary>{_table(calls, ended)}</details>"
    return str(_CLEANER.clean(f'<div class="cellgate-calls">{body}</div>'))


def calls_text(calls: list[dict[str, Any]], note: list[str] | None = None) -> str:
    lines = [_headline(calls), *(value_text(line, NOTE_CHARS) for line in note or []), *([""] if note else [])]
    many = len(calls) > FULL_TABLE_UP_TO
    if many:
        lines += [f"  {count} x {value_text(tool, 100)} {value_text(decision, 40)} -> {state}"
                  for (tool, decision, state), count in sorted(summary(calls).items())]
        lines.append("not ok:" if any(not is_ok(c) for c in calls) else "all ok")
    shown = [c for c in calls if not is_ok(c)] if many else calls
    for call in shown[:FULL_TABLE_UP_TO]:
        rule = f" (rule {value_text(call.get('rule'), 100)})" if call.get("rule") else ""
        failed = "" if call.get("ok") else f": {value_text(_failure(call), 120)}"
        lines.append(f"  #{value_text(call.get('seq'), 20)} {value_text(call.get('tool'), 100)} "
                     f"{value_text(cs.decision(call), 40)}{rule} -> {outcome(call)}{failed}")
    if len(shown) > FULL_TABLE_UP_TO or len(shown) < len(calls):
        lines.append(f"  ({len(calls) - min(len(shown), FULL_TABLE_UP_TO)} more not listed here)")
    return "\n".join(lines)


def calls_output(calls: list[dict[str, Any]], ended: Any = None, status: Any = None) -> dict[str, Any]:
    """The host's output for a cell that made ``calls`` (as metadata.cellgate.calls lists them), ``ended`` with
    ``status`` (one that is not ok gets the note on its writes)."""
    note = writes_note(calls, status)
    return {"output_type": "display_data", "metadata": {"cellgate": dict(HOST_MARK)},
            "data": {CALLS_MIME: {"calls": calls}, "text/html": calls_html(calls, ended, note),
                     "text/plain": calls_text(calls, note)}}


__all__ = ["CALLS_HEAD", "CALLS_MIME", "approver_html", "calls_html", "calls_output", "calls_table", "calls_text",
           "claims_text", "is_host_output", "outcome", "summary", "writes_note"]
