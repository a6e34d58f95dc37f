"""Journal records applied to cells: the one way a notebook's content is made.

The live ``Recorder`` feeds each record it writes to its own reducer, and
``cellgate recover`` and ``cellgate verify`` feed a whole journal to a fresh
one, so the notebook of a run and the one rebuilt from its journal are the
same. Events an extension writes are shown by the renderer it registered
(``cellgate.gate.audit.events``).
"""

from __future__ import annotations

import itertools
from typing import Any

import nbformat
from nbformat import NotebookNode

from cellgate.gate.audit import events, render
from cellgate.gate.audit.cells import CellRecord
from cellgate.gate.audit.sanitize import sanitize_output

# The core's events that change a cell; any other event may have a registered renderer.
CELL_EVENTS = frozenset({"cell-started", "output", "execute-input", "call-started", "call-finished", "cell-ended",
                         "refusals-coalesced", "refusals-dropped", "late-output", "cell-aborted"})


LIVE_EVENTS = ("session-paused", "session-resumed", "session-forked", "trial-kept", "trial-discarded",
               "session-continued", "plan-made", "plan-applied")


def _writes_that_stay(record: dict[str, Any]) -> str:
    """A discarded trial's writes, which the kernel's state forgets and the world does not (read back: each line
    shown as inline code, its backticks replaced, at most 20)."""
    parts = []
    for key, title in (("writes_stay", "Its writes stay done in the world"),
                       ("writes_unknown", "Its writes of unknown outcome may be done")):
        lines = record.get(key)
        if isinstance(lines, list) and lines:
            parts.append(f" {title} ({len(lines)}): {_inline(lines)}.")
    return "".join(parts)


def _inline(lines: list[Any], shown: int = 20) -> str:
    """Lines read back from a journal as inline code (backticks replaced), the first ``shown`` and a count."""
    more = f" and {len(lines) - shown} more" if len(lines) > shown else ""
    return ", ".join(f"`{str(line)[:200].replace('`', chr(39))}`" for line in lines[:shown]) + more


def live_note(record: dict[str, Any]) -> str:
    """What a reader is told where the session's kernel was paused into a checkpoint, resumed or forked."""
    checkpoint = str(record.get("checkpoint", ""))[:16]
    if record["event"] == "session-paused":
        return f"**The session was paused at {record['time']}**: its kernel was saved as checkpoint `{checkpoint}`."
    if record["event"] == "session-forked":
        forks = record.get("forks")
        into = (f"into {forks} session{'' if forks == 1 else 's'}" if isinstance(forks, int)
                else "for a pool of sessions")
        return (f"**The session was forked at {record['time']}** {into} (checkpoint `{checkpoint}`); each has a "
                "notebook of its own that names this one.")
    if record["event"] in ("trial-kept", "trial-discarded"):
        verdict = "kept: the session goes on there" if record["event"] == "trial-kept" else "discarded"
        note = (f"**A trial cell ran in a fork** (`{str(record.get('notebook', ''))[:200]}`, "
                f"{str(record.get('status', ''))[:20]}) and was {verdict}.")
        return note + _writes_that_stay(record)
    if record["event"] == "plan-made":
        found = record.get("writes")
        lines: list[Any] = found if isinstance(found, list) else []
        return (f"**A plan was made at {record['time']}** (plan `{str(record.get('plan', ''))[:16]}`, in the fork "
                f"`{str(record.get('notebook', ''))[:200]}`): {len(lines)} write{'' if len(lines) == 1 else 's'} "
                f"listed, none made{': ' + _inline(lines) if lines else ''}.")
    if record["event"] == "plan-applied":
        return (f"**Plan `{str(record.get('plan', ''))[:16]}` was applied at {record['time']}**, approved once by "
                f"`{str(record.get('approver', ''))[:200].replace('`', chr(39))}`: the next cell is its code, each "
                "of its writes approved by the plan.")
    if record["event"] == "session-continued":  # a kept trial's fork: the session goes on here
        return (f"**The trial was kept at {record['time']}**: the session of "
                f"`{str(record.get('continued_from', ''))[:200]}` goes on in this notebook.")
    return (f"**The session was resumed at {record['time']}** from checkpoint `{checkpoint}`: its variables are "
            "as they were when it was paused.")


def ended_note(record: dict[str, Any]) -> str:
    """What a reader is told where a session's record ends because a kept trial goes on in another notebook."""
    return (f"**The session goes on in `{str(record.get('continued_in', ''))[:200]}`** from {record['time']}: "
            "its trial was kept, and this record ends here.")


def branch_extra(record: dict[str, Any]) -> dict[str, Any]:
    """A note's fields as its markdown cell's metadata keeps them: its checkpoint and where the session's branches
    went (a trial's fork notebook, the notebook a kept trial goes on in or came from; read back as untrusted)."""
    forks = record.get("forks")
    return {"kind": record["event"], "checkpoint": str(record.get("checkpoint", ""))[:64],
            **{key: str(record[key])[:200] for key in ("notebook", "continued_in", "continued_from") if key in record},
            **({"forks": forks} if isinstance(forks, int) and not isinstance(forks, bool) else {})}


def restart_note(record: dict[str, Any]) -> str:
    """What a reader of the notebook is told when the kernel was restarted under the session."""
    gone = record.get("variables_gone")
    why = {"memory": "after the sandbox reached its memory limit",
           "message-size": "after it sent a message over the host's size limit",
           "frontend": "at its frontend's request"}.get(str(record.get("reason")), "")
    if gone is None:
        lost = "Every variable is gone (the names were not known)."
    elif gone:
        lost = "These variables are gone: " + ", ".join(f"`{name}`" for name in gone) + "."
    else:
        lost = "No variables were defined."
    return f"**The kernel was restarted {why}.** {lost}".replace(" .", ".")


FILE_EVENTS = frozenset({"file-uploaded", "file-downloaded"})  # Session.upload / download (session.files)


def file_extra(record: dict[str, Any]) -> dict[str, Any]:
    """A file record's fields as its markdown cell's metadata keeps them (read back as untrusted: bounded)."""
    size = record.get("size")
    return {"kind": record["event"], **{key: str(record.get(key, ""))[:4096] for key in ("path", "resolved", "blob")},
            "size": size if isinstance(size, int) and not isinstance(size, bool) else None,
            "sha256": str(record.get("sha256", ""))[:64]}


def file_note(record: dict[str, Any]) -> str:
    """What a reader of the notebook is told of a file moved in or out of the sandbox."""
    extra = file_extra(record)
    path = "".join(c for c in extra["resolved"] if c.isprintable() and c != "`")  # a code span shows it as text
    verb = "Uploaded" if record["event"] == "file-uploaded" else "Downloaded"
    return (f"**{verb}** `{path}` ({extra['size']:,} bytes, sha256 `{extra['sha256']}`)"
            if isinstance(extra["size"], int) else f"**{verb}** `{path}`")


class Reducer:
    """Builds cells from journal records."""

    def __init__(self) -> None:
        self.metadata: dict[str, Any] = {}
        self.sections: dict[str, Any] = {}  # kept by registered event renderers, shown in metadata.cellgate
        self.cells: list[CellRecord] = []
        self.by_id: dict[str, CellRecord] = {}
        self._serials = itertools.count(1)
        self.head: dict[str, Any] | None = None
        self.trusted_mime: tuple[str, ...] = ()  # [frontend] trusted_mime of the run, from its metadata

    def _new_cell(self, msg_id: str, source: str, time: str, **fields: Any) -> CellRecord:
        cell = CellRecord(msg_id=msg_id, source=source, started=time, serial=next(self._serials), **fields)
        self.cells.append(cell)
        self.by_id[cell.msg_id] = cell
        return cell

    def markdown_cell(self, cell_id: str, source: str, time: str, extra: dict[str, Any]) -> CellRecord:
        """A markdown cell, shown at once (for ``events.Run``)."""
        return self._new_cell(cell_id, source, time, kind="markdown", status="ok", extra=extra)

    def apply(self, record: dict[str, Any]) -> CellRecord | None:
        self.head = {"seq": record["seq"], "hash": record["hash"]}
        event = record["event"]
        if event == "session-started":
            self.metadata = dict(record["metadata"])
            frontend = self.metadata.get("frontend")
            trusted = frontend.get("trusted_mime") if isinstance(frontend, dict) else None
            self.trusted_mime = tuple(str(t) for t in trusted) if isinstance(trusted, list) else ()
            return None
        if event == "recovered":
            self.crash_ending()
            return None
        if event == "kernel-restarted":
            return self.markdown_cell(f"restart-{record['seq']}", restart_note(record), record["time"],
                                      {"kind": "kernel-restarted", "reason": record.get("reason"),
                                       "variables_gone": record.get("variables_gone")})
        if event in LIVE_EVENTS:
            return self.markdown_cell(f"{event}-{record['seq']}", live_note(record), record["time"],
                                      branch_extra(record))
        if event == "session-ended" and "continued_in" in record:  # the branch a kept trial goes on in
            return self.markdown_cell(f"{event}-{record['seq']}", ended_note(record), record["time"],
                                      branch_extra(record))
        if event in FILE_EVENTS:
            return self.markdown_cell(f"file-{record['seq']}", file_note(record), record["time"], file_extra(record))
        if event == "cell-sent":
            subshell, traceparent, argv = record.get("subshell"), record.get("traceparent"), record.get("argv")
            extra: dict[str, Any] = {"argv": [str(a) for a in argv]} if isinstance(argv, list) else {}
            if isinstance(record.get("retry_of"), str):  # the chain of attempts it belongs to (``calls.retry``)
                extra["retry_of"] = record["retry_of"][:128]
            return self._new_cell(record["msg_id"], record["source"], record["time"], extra=extra,
                                  silent=bool(record.get("silent")), kind=record.get("kind", "code"),
                                  subshell=str(subshell)[:64] if subshell is not None else None,
                                  traceparent=traceparent if isinstance(traceparent, str) else None)
        if event not in CELL_EVENTS:
            extension = events.renderer(event)
            if extension is not None:
                return extension(self, record)
        cell = self.by_id.get(str(record.get("msg_id")))
        if cell is None:
            return None
        cell.version += 1
        self._apply_to_cell(cell, event, record)
        return cell

    def _apply_to_cell(self, cell: CellRecord, event: str, record: dict[str, Any]) -> None:
        if event == "cell-started":
            cell.started = record["time"]
            trace = record.get("trace")  # a journal is read back as untrusted input: kept only as a mapping
            cell.trace = {str(k): str(v)[:64] for k, v in list(trace.items())[:4]} if isinstance(trace, dict) else None
        elif event == "output":  # the journal keeps the kernel's output; cells hold what a frontend may see
            cell.add_output(sanitize_output(record["output"], self.trusted_mime))
        elif event == "execute-input":
            cell.execution_count = record["execution_count"]
        elif event == "call-started":
            cell.pending_calls[record["call"]["seq"]] = dict(record["call"], outcome="started")
        elif event == "call-finished":
            cell.pending_calls.pop(record["call"]["seq"], None)
            cell.calls.append(record["call"])
        elif event == "cell-ended":
            cell.status = record["status"]
            cell.ended = record["time"]
            cell.execution_count = record.get("execution_count", cell.execution_count)
            cell.limits_hit = list(record.get("limits_hit") or [])
            cell.error = record.get("error")
            cell.journal = {"seq": record["seq"], "hash": record["hash"]}
        elif event == "refusals-coalesced":  # identical refusals, recorded once with their count
            cell.calls = [dict(c, repeated=record["repeated"]) if c.get("seq") == record["call_seq"] else c
                          for c in cell.calls]
        elif event == "refusals-dropped":
            cell.refusals_dropped = {k: record.get(k) for k in ("count", "first_tool", "last_tool", "budget")}
        elif event == "late-output":
            cell.late_outputs.append(nbformat.from_dict(sanitize_output(record["output"], self.trusted_mime)))
        elif event == "cell-aborted":
            self.cells.remove(cell)

    def crash_ending(self) -> None:
        """After a crash: a cell that never ended was killed; a call that never finished is unknown."""
        for cell in self.cells:
            for call in cell.pending_calls.values():
                call.update(outcome="needs-reconciliation", ok=False, error={
                    "kind": "unknown",
                    "message": "the host stopped after this call started and before its outcome was recorded; "
                               "it may or may not have taken effect: reconcile it before retrying"})
                cell.calls.append(call)
            cell.pending_calls.clear()
            if cell.status is None:
                cell.status = "killed"
                cell.limits_hit.append("host-died")

    def notebook(self, journal_name: str) -> NotebookNode:
        """The notebook of the cells so far (see ``render``)."""
        return render.notebook(self, journal_name)


__all__ = ["CELL_EVENTS", "FILE_EVENTS", "LIVE_EVENTS", "Reducer", "branch_extra", "ended_note", "file_note", "live_note",
           "restart_note"]
