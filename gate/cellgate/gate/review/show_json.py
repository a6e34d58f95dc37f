"""`cellgate show --json`: the facts of ``cellgate show`` for scripts, in a stable shape.

    {"format": "cellgate.show/1", "notebook": str,
     "session": {"id", "principal", "sandbox": {"runtime", "runsc_version", "platform"}, "replay_of",
                 "trace_id"},                 # the OpenTelemetry trace id, or null
     "run": {"started", "ended", "seconds"},            # the first cell's start, the last cell's end
     "totals": {"cells", "not_ok", "calls", "by_outcome": {outcome: n}, "by_decision": {decision: n},
                "by_tool": [{"tool", "calls", "failed", "outcomes": {outcome: n}, "total_ms", "max_ms"}]},
     "restarts": [{"after_cell", "reason", "variables_gone"}],
     "notes": [{"after_cell", "kind", "text", "checkpoint", "notebooks", "forks"}],  # paused, resumed, forked,
                      # trial kept or discarded, continued: "notebooks" are where the branch went (a fork's: the
                      # notebooks beside this one forked from its checkpoint) or came from
     "cells": [{"cell", "kind", "status", "title", "started", "ended", "seconds", "limits_hit",
                "error": {"ename", "evalue"} | null, "late_outputs", "late_calls",
                "calls_total", "calls_left_out", "calls": [CALL, ...]}],
     "agent": {"model", "mode", "turns", "ended", "usage"} | null,
     # where a kept trial's session went on (show.continued_chain), each notebook's cells in order; left out
     # with --cell. chain_problem: why the chain stops early (null: it ends where the session ended)
     "continued_in": [{"notebook", "cells": [...]}], "chain_problem": str | null}
    CALL = {"seq", "tool", "started", "duration_ms", "decision", "outcome", "rule", "args", "args_sha256",
            "error": {"exception", "kind", "message"} | null,
            "approval": {"approver", "requested", "answered", "waited_s", "reason"} | null,
            "late", "claimed": {"line", "source_line", "thread"} | null}

Times are ISO 8601 UTC strings (milliseconds, ``Z``) or null; ``outcome`` is one of
``call_summary.OUTCOMES``; ``decision`` is the recorded decision, except ``invalid`` or ``not-found`` for
a call refused before any rule; ``args`` is the arguments' JSON text. Every string taken from the notebook
is shortened (head and tail) and its hidden characters escaped, as in the terminal view. With ``--cell N``
only that cell is listed (totals stay the run's). A cell lists its failures first, at most ``--calls`` calls
(``calls_left_out`` says how many it did not list). New keys may be added; existing ones keep their
meaning while ``format`` is ``cellgate.show/1``.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from cellgate.gate._terminal import head_and_tail, value_text
from cellgate.gate.audit import call_summary as cs
from cellgate.gate.review.run_view import CellView, RunView
from cellgate.gate.review.show import CALLS_SHOWN, calls_listed, continued_chain, read, select_cell, where_to

FORMAT = "cellgate.show/1"
USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _when(value: Any) -> str | None:
    """A time as ISO 8601 UTC with milliseconds, or None (a recorded string that is not a time, or anything else)."""
    moment = value if isinstance(value, datetime) else cs.parse_time(value)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z") if moment is not None else None


def _string(value: Any, limit: int = 200) -> str | None:
    return head_and_tail(value, limit) if isinstance(value, str) else None


def call_json(call: dict[str, Any], cell_ended: Any) -> dict[str, Any]:
    asked = cs.approval(call)
    exception = cs.exception_name(call)
    claimed = cs.as_dict(call.get("claimed"))
    seq = call.get("seq")
    return {
        "seq": seq if isinstance(seq, int) and not isinstance(seq, bool) else None,
        "tool": _string(call.get("tool"), 200) or "?", "started": _when(call.get("started")),
        "duration_ms": cs.number(call.get("duration_ms")), "decision": head_and_tail(cs.decision(call), 60),
        "outcome": cs.outcome(call), "rule": _string(call.get("rule")),
        "args": value_text(call.get("args"), 600), "args_sha256": _string(call.get("args_sha256"), 64),
        "error": None if exception is None and cs.outcome(call) != "unknown" else {
            "exception": exception, "kind": head_and_tail(cs.error_kind(call), 40),
            "message": head_and_tail(cs.error_message(call), 1000)},
        "approval": None if asked is None else {
            "approver": head_and_tail(asked.approver, 200), "requested": _when(asked.requested),
            "answered": _when(asked.answered), "waited_s": asked.waited, "reason": head_and_tail(asked.reason, 500)},
        "late": cs.is_late(call, cell_ended),
        "claimed": {"line": claimed.get("line") if isinstance(claimed.get("line"), int) else None,
                    "source_line": _string(claimed.get("source_line"), 300),
                    "thread": _string(claimed.get("thread"), 100)} if claimed else None,
    }


def _cell_json(cell: CellView, limit: int | None) -> dict[str, Any]:
    listed, left_out = calls_listed(cell, limit)
    return {
        "cell": cell.number, "kind": cell.kind, "status": head_and_tail(cell.status, 40), "title": head_and_tail(cell.title, 200),
        "started": _when(cell.started), "ended": _when(cell.ended), "seconds": cell.seconds,
        "limits_hit": [head_and_tail(x, 60) for x in cell.limits_hit[:20]],
        "error": {"ename": head_and_tail(cell.error[0], 200), "evalue": head_and_tail(cell.error[1], 1000)}
        if cell.error else None,
        "late_outputs": len(cell.late_outputs), "late_calls": len(cell.late_calls),
        "calls_total": len(cell.calls), "calls_left_out": left_out,
        "calls": [call_json(call, cell.meta.get("ended")) for call in listed],
    }


def _continued(path: Path, run: RunView, calls: int | None, whole: bool) -> dict[str, Any]:
    """The notebooks a kept trial's session went on in (``show.continued_chain``), their cells in order."""
    if not whole:
        return {}
    chain, problem = continued_chain(path, run)
    return {"continued_in": [{"notebook": head_and_tail(p.name, 300), "cells": [_cell_json(c, calls) for c in v.cells]}
                             for p, v in chain],
            "chain_problem": problem}


def json_view(path: Path, *, cell: int | None = None, calls: int | None = CALLS_SHOWN) -> dict[str, Any]:
    """What ``cellgate show --json`` prints (the shape is in the module's docstring)."""
    run = read(path)
    chosen = select_cell(run, cell)
    sandbox = cs.as_dict(run.meta.get("sandbox"))
    agent = cs.as_dict(run.meta.get("agent"))
    all_calls = run.calls
    return {
        "format": FORMAT, "notebook": head_and_tail(path.name, 300),
        "session": {"id": _string(run.meta.get("session_id"), 100), "principal": _string(run.principal, 300),
                    "sandbox": {k: _string(sandbox.get(k), 100) for k in ("runtime", "runsc_version", "platform")},
                    "replay_of": _string(cs.as_dict(run.meta.get("replay_of")).get("notebook"), 500),
                    "trace_id": run.trace_id},
        "run": {"started": _when(run.started), "ended": _when(run.ended), "seconds": run.seconds},
        "totals": {
            "cells": len(run.cells), "not_ok": sum(c.status != "ok" for c in run.cells), "calls": len(all_calls),
            "by_outcome": cs.by_outcome(all_calls),
            "by_decision": {head_and_tail(k, 60): v for k, v in cs.by_decision(all_calls).items()},
            "by_tool": [{"tool": head_and_tail(t.tool, 200), "calls": t.calls, "failed": t.failed,
                         "outcomes": {k: t.outcomes[k] for k in cs.OUTCOMES if t.outcomes[k]},
                         "total_ms": round(t.total_ms, 3), "max_ms": round(t.max_ms, 3)}
                        for t in cs.by_tool(all_calls)]},
        "restarts": [{"after_cell": r.after, "reason": head_and_tail(r.reason, 60),
                      "variables_gone": None if r.variables_gone is None else [head_and_tail(v, 100) for v in
                                                                                r.variables_gone[:200]]}
                     for r in run.restarts],
        "notes": [{"after_cell": n.after, "kind": head_and_tail(n.kind, 40), "text": head_and_tail(n.text, 600),
                   "checkpoint": head_and_tail(n.checkpoint, 64),
                   "notebooks": [head_and_tail(name, 300) for name in where_to(n, path)], "forks": n.forks}
                  for n in run.notes],
        "cells": [_cell_json(c, calls) for c in ([chosen] if chosen is not None else run.cells)],
        **_continued(path, run, calls, chosen is None),
        "agent": None if not agent else {
            "model": _string(agent.get("model")), "mode": _string(agent.get("mode")),
            "turns": len(cs.as_list(agent.get("turns"))),
            "ended": _string(cs.as_dict(agent.get("ended")).get("reason")),
            "usage": {k: cs.count(cs.as_dict(agent.get("usage")).get(k)) for k in USAGE}},
    }


__all__ = ["FORMAT", "call_json", "json_view"]
