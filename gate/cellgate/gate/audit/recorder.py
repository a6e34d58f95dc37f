"""The audit trail: the journal, and the notebook rendered from it.

Every change to a session's record is a journal record first; ``Reducer``
applies journal records to cells, and the notebook is rendered from the
reducer's cells. The live ``Recorder`` feeds each record it writes to its own
reducer, and ``cellgate recover`` feeds a whole journal to a fresh one, so the
notebook of a run and the one rebuilt from its journal are the same.

The notebook is rewritten atomically when a cell ends (temp file, fsync,
rename, fsync of the folder), so a crash never leaves it truncated. It is never
signed or marked trusted.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import nbformat
from nbformat.v4 import new_markdown_cell, new_notebook, output_from_msg
from nbformat.v4.rwbase import split_lines

from cellgate.gate._faults import failpoint
from cellgate.gate._json import canonical_json, write_atomically
from cellgate.gate.audit.journal import Journal, JournalError, integrity, json_safe, read_journal
from cellgate.gate.audit.sanitize import sanitize_output
from cellgate.gate.calls.dispatch import CallRecord

CellStatus = Literal["ok", "error", "interrupted", "timeout", "killed", "kernel-died", "memory", "rejected"]
# code: a program the kernel ran; direct: a tool the model called on its own turn
# (run by the gate, no kernel involved); markdown: the model's text of a turn.
CellKind = Literal["code", "direct", "markdown"]

INLINE_RESULT_BYTES = 2048


@dataclass
class CellRecord:
    msg_id: str
    source: str
    started: str
    silent: bool = False
    ended: str | None = None
    status: CellStatus | None = None
    execution_count: int | None = None
    outputs: list[Any] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # as the notebook lists them
    call_records: list[CallRecord] = field(default_factory=list)  # live objects, for the Session API
    pending_calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # started, not finished
    limits_hit: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None
    journal: dict[str, Any] | None = None  # seq and hash of the record that ended the cell
    version: int = 0  # bumped on every change, so a rendered cell can be cached
    serial: int = 0  # position in the run; msg_ids can repeat after a kernel restart
    kind: CellKind = "code"
    late_outputs: list[Any] = field(default_factory=list)  # from work the cell started, after it ended
    extra: dict[str, Any] = field(default_factory=dict)  # markdown cells: the turn, model and usage
    refusals_dropped: dict[str, Any] | None = None  # refused calls past the cell's budget, summarised

    def add_output(self, output: dict[str, Any]) -> None:
        if output.get("output_type") == "clear_output":
            self.outputs.clear()
            return
        last = self.outputs[-1] if self.outputs else None
        if (output.get("output_type") == "stream" and last is not None and last.get("output_type") == "stream"
                and last.get("name") == output.get("name")):
            last["text"] += output["text"]  # merge consecutive stream chunks, as Jupyter does
        else:
            self.outputs.append(nbformat.from_dict(output))

    def as_cell(self) -> Any:
        if self.kind == "markdown":
            cell = new_markdown_cell(source=self.source)
            cell.id = f"cell-{self.serial}"
            cell.metadata["cellgate"] = {"kind": "model", **self.extra}
            return cell
        # Built directly, not with new_code_cell, which validates the cell against
        # the schema on every rendering; the outputs were validated when captured,
        # and the whole notebook is validated when the session closes.
        cell = nbformat.from_dict({
            "id": f"cell-{self.serial}",  # deterministic: a rendering must not differ from the last one
            "cell_type": "code", "metadata": {}, "execution_count": self.execution_count, "source": self.source,
            "outputs": [nbformat.from_dict(o) for o in self.outputs]})
        calls = sorted([*self.calls, *self.pending_calls.values()], key=lambda c: c["seq"])
        cell.metadata["cellgate"] = {
            "sha256": hashlib.sha256(self.source.encode()).hexdigest(),
            "started": self.started,
            "ended": self.ended,
            "status": self.status,
            "limits_hit": list(self.limits_hit),
            "calls": calls,
        }
        for key in ("error", "journal"):
            if getattr(self, key):
                cell.metadata["cellgate"][key] = getattr(self, key)
        if self.silent:
            cell.metadata["cellgate"]["silent"] = True
        if self.kind == "direct":
            cell.metadata["cellgate"]["kind"] = "direct"
        if self.refusals_dropped:
            cell.metadata["cellgate"]["refusals_dropped"] = dict(self.refusals_dropped)
        if self.late_outputs:  # never merged into the outputs: flagged as what the cell's work printed after it
            cell.metadata["cellgate"]["late_outputs"] = [dict(o) for o in self.late_outputs]
        return cell


def restart_note(record: dict[str, Any]) -> str:
    """What a reader of the notebook is told when the kernel was restarted under the session."""
    gone = record.get("variables_gone")
    why = {"memory": "after the sandbox reached its memory limit",
           "message-size": "after it sent a message over the host's size limit"}.get(str(record.get("reason")), "")
    if gone is None:
        lost = "Every variable is gone (the names were not known)."
    elif gone:
        lost = "These variables are gone: " + ", ".join(f"`{name}`" for name in gone) + "."
    else:
        lost = "No variables were defined."
    return f"**The kernel was restarted {why}.** {lost}".replace(" .", ".")


def output_dict(msg: dict[str, Any]) -> dict[str, Any]:
    """An IOPub output message as an nbformat output (clear_output as a marker)."""
    if msg["header"]["msg_type"] == "clear_output":
        return {"output_type": "clear_output"}
    return dict(output_from_msg(json_safe(msg)))


class Reducer:
    """Builds cells from journal records; the one way a notebook's content is made."""

    def __init__(self) -> None:
        self.metadata: dict[str, Any] = {}
        self.cells: list[CellRecord] = []
        self.by_id: dict[str, CellRecord] = {}
        self._serials = itertools.count(1)
        self.head: dict[str, Any] | None = None
        self.agent: dict[str, Any] | None = None  # set when an agent loop drives the session
        self.trusted_mime: tuple[str, ...] = ()  # [frontend] trusted_mime of the run, from its metadata

    def _new_cell(self, msg_id: str, source: str, time: str, **fields: Any) -> CellRecord:
        cell = CellRecord(msg_id=msg_id, source=source, started=time, serial=next(self._serials), **fields)
        self.cells.append(cell)
        self.by_id[cell.msg_id] = cell
        return cell

    def _agent_event(self, event: str, record: dict[str, Any]) -> CellRecord | None:
        if event == "agent-started":
            self.agent = {key: record[key] for key in ("task", "model", "mode") if key in record}
            self.agent.update(turns=[], usage={}, ended=None)
            return self._new_cell("agent-task", f"**Task:** {record['task']}", record["time"],
                                  kind="markdown", status="ok", extra={"kind": "task"})
        if self.agent is None:
            return None
        if event == "model-turn":
            usage = {k: int(v) for k, v in (record.get("usage") or {}).items() if isinstance(v, int)}
            turn = {"turn": record["turn"], "model": record.get("model"), "stop_reason": record.get("stop_reason"),
                    "usage": usage}
            self.agent["turns"].append(turn)
            totals = self.agent["usage"]
            for key, value in usage.items():
                totals[key] = totals.get(key, 0) + value
            if str(record.get("text") or "").strip():
                return self._new_cell(f"turn-{record['turn']}", record["text"], record["time"], kind="markdown",
                                      status="ok", extra=turn)
        elif event == "agent-ended":
            self.agent["ended"] = {"reason": record["reason"], "turns": record.get("turns"),
                                   "detail": record.get("detail")}
        return None

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
        if event in ("agent-started", "model-turn", "agent-ended"):
            return self._agent_event(event, record)
        if event == "kernel-restarted":
            return self._new_cell(f"restart-{record['seq']}", restart_note(record), record["time"], kind="markdown",
                                  status="ok", extra={"kind": "kernel-restarted", "reason": record.get("reason"),
                                                      "variables_gone": record.get("variables_gone")})
        if event == "cell-sent":
            return self._new_cell(record["msg_id"], record["source"], record["time"],
                                  silent=bool(record.get("silent")), kind=record.get("kind", "code"))
        cell = self.by_id.get(str(record.get("msg_id")))
        if cell is None:
            return None
        cell.version += 1
        if event == "cell-started":
            cell.started = record["time"]
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
        return cell

    def crash_ending(self) -> None:
        """After a crash: a cell that never ended was killed; a call that never finished is unknown."""
        for cell in self.cells:
            for seq, call in cell.pending_calls.items():
                call.update(outcome="needs-reconciliation", ok=False, error={
                    "kind": "unknown",
                    "message": "the host stopped after this call started and before its outcome was recorded; "
                               "it may or may not have taken effect: reconcile it before retrying"})
                cell.calls.append(call)
            cell.pending_calls.clear()
            if cell.status is None:
                cell.status = "killed"
                cell.limits_hit.append("host-died")

    def notebook(self, journal_name: str) -> Any:
        nb = new_notebook()
        nb.metadata = self._notebook_metadata(journal_name)
        nb.cells = [c.as_cell() for c in self.cells if c.status is not None]
        return nb

    def _notebook_metadata(self, journal_name: str) -> dict[str, Any]:
        return {
            "kernelspec": {"name": "cellgate", "display_name": "cellgate (gVisor)", "language": "python"},
            "language_info": {"name": "python"},
            "cellgate": {**json_safe(self.metadata), **({"agent": json_safe(self.agent)} if self.agent else {}),
                         "journal": {"file": journal_name, **(self.head or {})}},
        }

    def notebook_text(self, journal_name: str, cache: dict[int, tuple[int, str]]) -> str:
        """The notebook as nbformat JSON, reusing each ended cell's text while it is unchanged.

        Rewriting after every cell then costs a join of cached strings, not a
        re-serialisation of the whole run, so the per-cell cost stays flat.
        """
        parts = []
        for cell in self.cells:
            if cell.status is None:
                continue
            cached = cache.get(cell.serial)
            if cached is None or cached[0] != cell.version:
                node = split_lines(nbformat.from_dict({"cells": [cell.as_cell()]})).cells[0]
                text = json.dumps(node, sort_keys=True, indent=1, ensure_ascii=False)
                cached = cache[cell.serial] = (cell.version, text)
            parts.append(cached[1])
        metadata = json.dumps(self._notebook_metadata(journal_name), sort_keys=True, indent=1, ensure_ascii=False)
        return (f'{{\n "cells": [\n{",".join(parts)}\n ],\n "metadata": {metadata},\n'
                f' "nbformat": 4,\n "nbformat_minor": 5\n}}\n')


def journal_path(notebook: Path) -> Path:
    return notebook.with_name(notebook.stem + ".journal.jsonl")


def blobs_path(notebook: Path) -> Path:
    return notebook.with_name(notebook.stem + ".blobs")


class Recorder:
    """Writes a session's journal and renders its notebook."""

    def __init__(self, notebook_path: Path, session_metadata: dict[str, Any],
                 open_journal: Callable[[Path], Journal] = Journal) -> None:
        self.notebook_path = notebook_path
        notebook_path.parent.mkdir(parents=True, exist_ok=True)
        self.journal = open_journal(journal_path(notebook_path))
        self.blobs = blobs_path(notebook_path)
        self.reducer = Reducer()
        self._cell_text: dict[int, tuple[int, str]] = {}
        self._syncing: asyncio.Future[int] | None = None
        self._lock = threading.RLock()
        # The key that signs the journal is named in it (and so in the notebook), for `cellgate verify`.
        self.metadata = session_metadata = {**session_metadata, "integrity": integrity(self.journal.key)}
        # Set by the session to its gate's ``SecretScrubber.scrub_record``: applied to every record before it is written.
        self.scrub: Callable[[dict[str, Any]], dict[str, Any]] = lambda data: data
        self._write("session-started", sync=True, metadata=session_metadata)
        self.write_notebook()

    @property
    def cells(self) -> list[CellRecord]:
        return self.reducer.cells

    def _write(self, event: str, sync: bool = False, **data: Any) -> CellRecord | None:
        with self._lock:
            record = self.journal.append(event, sync=sync, **self.scrub(data))
            return self.reducer.apply(record)

    # -- what the service reports
    def cell_sent(self, msg_id: str, source: str, silent: bool, kind: CellKind = "code") -> CellRecord:
        extra = {"kind": kind} if kind != "code" else {}
        cell = self._write("cell-sent", sync=True, msg_id=msg_id, source=source, silent=silent, **extra)
        assert cell is not None
        return cell

    def cell_started(self, cell: CellRecord) -> None:
        self._write("cell-started", msg_id=cell.msg_id)

    def output(self, cell: CellRecord, output: dict[str, Any]) -> None:
        """One output (an nbformat output dict, see ``output_dict``)."""
        self._write("output", msg_id=cell.msg_id, output=output)

    def execute_input(self, cell: CellRecord, count: int) -> None:
        self._write("execute-input", msg_id=cell.msg_id, execution_count=count)

    async def call_started(self, cell: CellRecord, record: CallRecord) -> None:
        """The intent record, durable before the tool runs (raises JournalError if it cannot be).

        Concurrent calls share one fsync (group commit): it runs at the end of
        the loop turn in which their records were written, and each call waits
        until a sync that covers its record has finished. It runs on the gate's
        own loop, as the cell-ended one does: handing it to a worker thread and
        back cost half as much again as the fsync itself.
        """
        with self._lock:
            self._write("call-started", msg_id=cell.msg_id, call=record.as_metadata(INLINE_RESULT_BYTES))
            mine = self.journal.seq
        while self.journal.synced < mine:
            if self._syncing is None or self._syncing.done():
                self._syncing = self._sync_at_end_of_turn()
            await asyncio.shield(self._syncing)
        failpoint("after-intent")

    def _sync_at_end_of_turn(self) -> asyncio.Future[int]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int] = loop.create_future()

        def sync() -> None:
            try:
                done.set_result(self.journal.sync())
            except Exception as exc:  # JournalError: every call waiting on it fails closed
                done.set_exception(exc)

        loop.call_soon(sync)
        return done

    def call_finished(self, cell: CellRecord | None, record: CallRecord, full_result: Any = None) -> None:
        failpoint("after-call")
        entry = record.as_metadata(INLINE_RESULT_BYTES)
        if record.ok and "result" not in entry and record.result_sha256:
            self._store_blob(record.result_sha256, full_result if full_result is not None else record.result)
            entry["result_blob"] = f"{self.blobs.name}/{record.result_sha256}.json"
        # Not fsync'd on its own: losing it in a crash leaves the call "needs
        # reconciliation" (its intent is durable), never silently done twice.
        if cell is None:
            self._write("call-finished", msg_id=None, call=entry)
            return
        with self._lock:
            cell.call_records.append(record)
            self._write("call-finished", msg_id=cell.msg_id, call=entry)
        if cell.status is not None:  # finished after its cell ended (e.g. an approval withdrawn at the end)
            self.write_notebook()

    def _store_blob(self, digest: str, value: Any) -> None:
        self.blobs.mkdir(exist_ok=True)
        target = self.blobs / f"{digest}.json"
        if not target.exists():
            write_atomically(target, canonical_json(value))

    def cell_ended(self, cell: CellRecord, status: str, limits_hit: list[str], error: dict[str, str] | None) -> None:
        self._write("cell-ended", sync=True, msg_id=cell.msg_id, status=status, limits_hit=limits_hit,
                    error=error, execution_count=cell.execution_count)
        self.write_notebook()

    def kernel_restarted(self, reason: str, variables_gone: list[str] | None) -> None:
        self._write("kernel-restarted", sync=True, reason=reason, variables_gone=variables_gone)
        self.write_notebook()

    def late_output(self, cell: CellRecord, output: dict[str, Any]) -> None:
        """Output that work a cell started printed after the cell ended (journal only: the caller
        rewrites the notebook at a bounded rate, and every cell's end rewrites it too)."""
        self._write("late-output", msg_id=cell.msg_id, output=output)

    def cell_aborted(self, cell: CellRecord) -> None:
        self._write("cell-aborted", msg_id=cell.msg_id)

    def event(self, event: str, **data: Any) -> None:
        sync = event in ("kernel-died", "kernel-attached", "kernel-exited", "session-ended", "agent-ended")
        self._write(event, sync=sync, **data)

    # -- what an agent loop reports
    def agent_started(self, task: str, model: str, mode: str) -> None:
        self.event("agent-started", task=task, model=model, mode=mode)
        self.write_notebook()

    def model_turn(self, turn: int, model: str, text: str, usage: dict[str, int], stop_reason: str | None) -> None:
        """One API response: the model's text becomes a markdown cell; usage is summed in the metadata."""
        self.event("model-turn", turn=turn, model=model, text=text, usage=usage, stop_reason=stop_reason)
        self.write_notebook()

    def agent_ended(self, reason: str, turns: int, detail: str | None = None) -> None:
        self.event("agent-ended", reason=reason, turns=turns, detail=detail)
        self.write_notebook()

    # -- rendering
    def notebook(self) -> Any:
        with self._lock:
            return self.reducer.notebook(self.journal.path.name)

    def write_notebook(self) -> None:
        with self._lock:
            text = self.reducer.notebook_text(self.journal.path.name, self._cell_text)
        # The journal is the durable record (fsync'd at each cell's end) and
        # `cellgate recover` renders the notebook from it, so the notebook is
        # replaced atomically after every cell but not fsync'd each time.
        write_atomically(self.notebook_path, text, durable=False)

    def close(self) -> None:
        try:
            self.event("session-ended")
        except JournalError:
            pass
        try:
            self.write_notebook()
            nbformat.validate(nbformat.reads(self.notebook_path.read_text(encoding="utf-8"), as_version=4))
        finally:
            self.journal.close()

    # -- what the relay and the dispatcher ask
    def unwritable(self) -> str | None:
        """Why the journal cannot be written (it refuses every write from then on), or None."""
        return self.journal.broken

    def cell(self, msg_id: str) -> CellRecord | None:
        """The cell the frontend sent as ``msg_id``, if this session recorded it."""
        return self.reducer.by_id.get(msg_id)


def rebuild(journal: Path, notebook: Path | None = None) -> tuple[Path, Any, list[str]]:
    """`cellgate recover`: render the notebook from a journal after any crash."""
    found = read_journal(journal)
    if found.problem and not found.records:
        from cellgate.gate._errors import ConfigError

        raise ConfigError(f"{journal}: no readable journal record: {found.problem}; nothing to recover")
    notes = []
    if found.torn_tail:
        notes.append("the last journal record was cut short by the crash and was ignored")
    if found.problem:
        notes.append(f"stopped at a damaged record: {found.problem}")
    else:
        # The recovery is itself a journal record, so the rebuilt notebook verifies.
        try:
            writer = Journal(journal)
        except JournalError as exc:  # signed with another host's key, or unsigned: render it, append nothing
            notes.append(f"no recovery record was appended: {exc}")
            writer = None
        if writer is not None:
            writer.append("recovered", sync=True, notes=notes)
            writer.close()
            found = read_journal(journal)
    reducer = Reducer()
    for record in found.records:
        reducer.apply(record)
    if found.problem or not found.records or found.records[-1]["event"] != "recovered":
        reducer.crash_ending()
    target = notebook or journal.with_name(journal.name.removesuffix(".journal.jsonl") + ".ipynb")
    nb = reducer.notebook(journal.name)
    nbformat.validate(nb)
    for orphan in target.parent.glob(f".{target.name}.*.tmp"):
        orphan.unlink(missing_ok=True)
        notes.append(f"removed an unfinished notebook write {orphan.name}")
    write_atomically(target, nbformat.writes(nb))
    return target, nb, notes

