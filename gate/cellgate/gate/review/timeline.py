"""The timeline of ``cellgate report``: one row per cell on a shared time axis, as static HTML (no script).

Each row is a cell's bar from its start to its end, labelled with its number; ticks on the
bar mark its calls (a failed one in red); a call that finished after its cell ended, or had
not finished, is marked past the bar's end, and a cell whose work printed after it ended
carries a late-output marker. A kernel restart is a row of its own between the cells it
came between (the notebook keeps no time for it), drawn at the end of the cell before it.
Positions are percentages of the run's span; every label is HTML-escaped by the caller's
``esc``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime

from cellgate.gate._terminal import head_and_tail
from cellgate.gate.audit import call_summary as cs
from cellgate.gate.review.run_view import Restart, RunView

MAX_CALL_TICKS = 200  # per cell: a busy cell's ticks would be one smear anyway
STYLE = """
.tl { font-size: .8em; margin: 1em 0 2em; }
.tl-row { display: flex; align-items: center; height: 1.35em; }
.tl-label { width: 7em; flex: none; text-align: right; padding-right: .6em; white-space: nowrap; overflow: hidden; }
.tl-track { position: relative; flex: 1; height: 100%; border-left: 1px solid #bbb; border-right: 1px solid #bbb; }
.tl-grid { position: absolute; top: 0; bottom: 0; border-left: 1px dotted #ccc; }
.tl-bar { position: absolute; top: .2em; height: .95em; min-width: 2px; opacity: .85; }
.tl-call { position: absolute; top: .05em; height: 1.25em; width: 1px; background: #222; }
.tl-call.fail { background: #b00; width: 2px; }
.tl-mark { position: absolute; top: 0; font-weight: bold; white-space: nowrap; line-height: 1.35em; }
.tl-late { color: #a60; } .tl-restart { color: #a60; } .tl-restart.tl-memory { color: #b00; }
.tl-restart-line { position: absolute; top: 0; bottom: 0; border-left: 2px dashed currentColor; }
.tl-axis .tl-track { border: none; border-top: 1px solid #888; }
.tl-tick { position: absolute; top: 0; transform: translateX(-50%); white-space: nowrap; color: #555; }
"""


def tick_step(span: float, ticks: int = 6) -> float:
    """A round step (1, 2 or 5 times a power of ten, in seconds) giving about ``ticks`` ticks over ``span``."""
    raw = max(span, 1e-3) / ticks
    power: float = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)


def offset_label(seconds: float, step: float) -> str:
    """A tick's label: its offset from the run's start, as precise as the step needs."""
    if step >= 60:
        return f"+{seconds / 60:g} min"
    digits = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"+{seconds:.{digits}f} s"


class _Axis:
    def __init__(self, start: datetime, end: datetime) -> None:
        self.start = start
        self.span = max((end - start).total_seconds(), 1e-3)

    def at(self, moment: datetime | None) -> float | None:
        """``moment`` as a percentage of the span (clamped), or None."""
        if moment is None:
            return None
        return min(max(100 * (moment - self.start).total_seconds() / self.span, 0.0), 100.0)


def _beside(at: float) -> str:
    """Where a marker's label goes: right of ``at``, or left of it near the right edge."""
    return f"left:{at:.2f}%;padding-left:.4em" if at < 65 else f"right:{100 - at:.2f}%;padding-right:.4em"


def _row(label: str, track: str, cls: str = "", title: str = "") -> str:
    title_attr = f' title="{title}"' if title else ""
    return (f'<div class="tl-row {cls}"{title_attr}><div class="tl-label">{label}</div>'
            f'<div class="tl-track">{track}</div></div>')


def _restart_row(restart: Restart, axis: _Axis, where: datetime | None, esc: Callable[[object], str]) -> str:
    left = axis.at(where) or 0.0
    kind = "tl-memory" if restart.memory else ""
    what = f"kernel restarted ({esc(restart.reason)})"
    track = (f'<div class="tl-restart-line" style="left:{left:.2f}%"></div>'
             f'<span class="tl-mark" style="{_beside(left)}">&#x21bb; {what}</span>')
    return _row(f'<span class="tl-restart {kind}">restart</span>', track, f"tl-restart {kind}",
                f"{what} after cell {restart.after}")


def timeline(run: RunView, esc: Callable[[object], str]) -> str:
    """The timeline section, or '' when no cell has both a start and an end time."""
    start, end = run.started, run.ended
    if start is None or end is None or end < start:
        return ""
    axis = _Axis(start, end)
    step = tick_step(axis.span)
    marks = [i * step for i in range(int(axis.span / step) + 1)]
    grid = "".join(f'<div class="tl-grid" style="left:{100 * s / axis.span:.2f}%"></div>' for s in marks)
    rows: list[str] = []
    restarts = {r.after: r for r in run.restarts}
    previous_end: datetime | None = None
    for cell in run.cells:
        if cell.number - 1 in restarts:
            rows.append(_restart_row(restarts[cell.number - 1], axis, previous_end, esc))
        left, right = axis.at(cell.started), axis.at(cell.ended)
        parts = [grid]
        if left is not None and right is not None:
            status = esc(cell.status)
            parts.append(f'<div class="tl-bar {status}" style="left:{left:.2f}%;width:{max(right - left, 0.2):.2f}%" '
                         f'title="cell {cell.number}: {status}, {esc(cs.format_duration(cell.seconds))}"></div>')
        for call in cell.calls[:MAX_CALL_TICKS]:
            at = axis.at(cs.call_started(call))
            if at is not None:
                fail = " fail" if cs.is_failure(cs.outcome(call)) else ""
                parts.append(f'<div class="tl-call{fail}" style="left:{at:.2f}%" title="#{esc(call.get("seq"))} '
                             f'{esc(call.get("tool"))}: {esc(cs.LABELS[cs.outcome(call)])}"></div>')
        late = cell.late_calls
        after = right if right is not None else 100.0
        notes = ([f"{len(late)} late call{'s' if len(late) != 1 else ''}"] if late else []) + \
            ([f"{len(cell.late_outputs)} late output{'s' if len(cell.late_outputs) != 1 else ''}"]
             if cell.late_outputs else [])
        if notes:
            parts.append(f'<span class="tl-mark tl-late" style="{_beside(after)}">&#x25c6; {esc(", ".join(notes))}</span>')
        rows.append(_row(f"cell {cell.number}", "".join(parts), title=esc(head_and_tail(cell.title, 120))))
        previous_end = cell.ended or previous_end
    if len(run.cells) in restarts:
        rows.append(_restart_row(restarts[len(run.cells)], axis, previous_end, esc))
    ticks = "".join(f'<span class="tl-tick" style="left:{100 * s / axis.span:.2f}%">{esc(offset_label(s, step))}</span>'
                    for s in marks)
    axis_row = _row("", ticks, "tl-axis")
    return (f"<h2>Timeline</h2><p>{esc(cs.format_time(start))} to {esc(cs.format_time(end))} "
            f"({esc(cs.format_duration(axis.span))}); ticks on a bar are its calls (red: failed), "
            "&#x25c6; marks late calls and late output, &#x21bb; a kernel restart.</p>"
            f'<div class="tl">{"".join(rows)}{axis_row}</div>')


__all__ = ["STYLE", "offset_label", "tick_step", "timeline"]
