"""The audit trail of a live session: every change is a journal record first, then the notebook is rendered.

The ``Recorder`` writes each record to the signed journal and applies it to
its ``Reducer``; the notebook is rendered from the reducer's cells. The
notebook is rewritten atomically when a cell ends (temp file, rename), so a
crash never leaves it truncated; the journal is the durable record, and
``cellgate recover`` renders the same notebook from it. The notebook is never
signed or marked trusted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from cellgate.gate._faults import failpoint
from cellgate.gate._json import write_atomically
from cellgate.gate.audit.blobs import BlobStore, blobs_path
from cellgate.gate.audit.cells import CellKind, CellRecord, CellStatus, output_dict
from cellgate.gate.audit.journal import Journal, JournalError, integrity
from cellgate.gate.audit.owned import make_folders
from cellgate.gate.audit.recover import rebuild
from cellgate.gate.audit.reducer import Reducer
from cellgate.gate.audit.render import NotebookText
from cellgate.gate.audit.sanitize import sanitize_output
from cellgate.gate.calls.dispatch import CallRecord
from cellgate.gate.telemetry import NO_TELEMETRY, Telemetry

INLINE_RESULT_BYTES = 2048
# Written with an fsync of their own: the kernel's fate and the session's end.
SYNCED_EVENTS = frozenset({"kernel-died", "kernel-attached", "kernel-exited", "session-ended", "session-paused",
                           "session-resumed"})


def journal_path(notebook: Path) -> Path:
    return notebook.with_name(notebook.stem + ".journal.jsonl")


class Recorder:
    """Writes a session's journal and renders its notebook."""

    def __init__(self, notebook_path: Path, session_metadata: dict[str, Any],
                 open_journal: Callable[[Path], Journal] = Journal, resumed: Sequence[dict[str, Any]] = ()) -> None:
        self.notebook_path = notebook_path
        make_folders(notebook_path.parent)  # 0700, missing parents too: nobody else lists a run's name and time
        self.blobs = BlobStore(blobs_path(notebook_path))  # a planted one refuses the start before anything is written
        try:
            self.journal = open_journal(journal_path(notebook_path))
        except BaseException:
            self.blobs.close()
            raise
        self.reducer = Reducer()
        self._text = NotebookText()
        self._syncing: asyncio.Future[int] | None = None
        self._lock = threading.RLock()
        self._followers: dict[str, Callable[[dict[str, Any]], None]] = {}  # msg_id -> who is told its outputs
        self._call_followers: dict[str, Callable[[dict[str, Any]], None]] = {}  # msg_id -> who is told its calls
        # Set by the session to its gate's ``SecretScrubber.scrub_record``: applied to every record before it is written.
        self.scrub: Callable[[dict[str, Any]], dict[str, Any]] = lambda data: data
        # Set by the session to its observer (``cellgate.gate.telemetry``): told of cells as they start and end.
        self.telemetry: Telemetry = NO_TELEMETRY
        if resumed:  # a record continued by a new host process (``audit.resume``): its records so far, no new start
            for record in resumed:
                self.reducer.apply(record)
            self.metadata = self.reducer.metadata
        else:
            # The key that signs the journal is named in it (and so in the notebook), for `cellgate verify`.
            self.metadata = session_metadata = {**session_metadata, "integrity": integrity(self.journal.key)}
            self._write("session-started", sync=True, metadata=session_metadata)
        self.write_notebook()

    @property
    def cells(self) -> list[CellRecord]:
        return self.reducer.cells

    def _write(self, event: str, sync: bool = False, **data: Any) -> CellRecord | None:
        with self._lock:
            record = self.journal.append(event, sync=sync, **self.scrub(data))
            return self.reducer.apply(record)

    # -- what the relay reports
    def cell_sent(self, msg_id: str, source: str, silent: bool, kind: CellKind = "code",
                  subshell: str | None = None, traceparent: str | None = None,
                  argv: list[str] | None = None, retry_of: str | None = None) -> CellRecord:
        """A cell a frontend sent (``subshell``: the kernel subshell it runs on; None: the main shell;
        ``traceparent``: the trace of the request that sent it, checked; ``argv``: a command's; ``retry_of``: the
        first attempt of the failed cell this one retries, ``calls.retry``)."""
        extra: dict[str, Any] = {"kind": kind} if kind != "code" else {}
        if retry_of is not None:
            extra["retry_of"] = retry_of
        if argv is not None:
            extra["argv"] = argv
        if subshell is not None:
            extra["subshell"] = subshell
        if traceparent is not None:
            extra["traceparent"] = traceparent
        cell = self._write("cell-sent", sync=True, msg_id=msg_id, source=source, silent=silent, **extra)
        assert cell is not None
        return cell

    def cell_started(self, cell: CellRecord) -> None:
        trace = self.telemetry.cell_started(cell, cell.source, cell.kind, cell.traceparent)
        extra: dict[str, Any] = {"trace": trace} if trace else {}
        self._write("cell-started", msg_id=cell.msg_id, **extra)

    def output(self, cell: CellRecord, output: dict[str, Any]) -> None:
        """One output (an nbformat output dict, see ``output_dict``); told to the cell's follower, if any."""
        with self._lock:
            record = self.journal.append("output", **self.scrub({"msg_id": cell.msg_id, "output": output}))
            self.reducer.apply(record)
            follower = self._followers.get(cell.msg_id)
        if follower is not None:  # as the notebook holds it: secrets scrubbed, sanitized for a frontend
            follower(sanitize_output(record["output"], self.reducer.trusted_mime))

    def follow(self, msg_id: str, follower: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Tell ``follower`` each output of the cell ``msg_id`` as it is recorded (on the recording thread);
        returns the function that stops it."""
        with self._lock:
            self._followers[msg_id] = follower
        return lambda: self._unfollow(msg_id, follower)

    def _unfollow(self, msg_id: str, follower: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            if self._followers.get(msg_id) is follower:
                del self._followers[msg_id]
            if self._call_followers.get(msg_id) is follower:
                del self._call_followers[msg_id]

    def follow_calls(self, msg_id: str, follower: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        """Tell ``follower`` each gated call of the cell ``msg_id`` as it finishes (its record as the notebook
        holds it, secrets scrubbed; on the recording thread); returns the function that stops it."""
        with self._lock:
            self._call_followers[msg_id] = follower
        return lambda: self._unfollow(msg_id, follower)

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

    def call_finished(self, cell: CellRecord, record: CallRecord) -> None:
        failpoint("after-call")
        entry = record.as_metadata(INLINE_RESULT_BYTES)
        if record.ok and "result" not in entry and record.result_sha256:
            entry["result_blob"] = self.blobs.store(record.result_sha256, record.recorded_text())
        # Not fsync'd on its own: losing it in a crash leaves the call "needs
        # reconciliation" (its intent is durable), never silently done twice.
        with self._lock:
            cell.call_records.append(record)
            self._write("call-finished", msg_id=cell.msg_id, call=entry)
            follower = self._call_followers.get(cell.msg_id)
        if follower is not None:
            follower(self.scrub({"call": entry})["call"])
        if cell.status is not None:  # finished after its cell ended (e.g. an approval withdrawn at the end)
            self.write_notebook()

    def cell_ended(self, cell: CellRecord, status: CellStatus, limits_hit: list[str],
                   error: dict[str, str] | None) -> None:
        self._write("cell-ended", sync=True, msg_id=cell.msg_id, status=status, limits_hit=limits_hit,
                    error=error, execution_count=cell.execution_count)
        self.telemetry.cell_ended(cell, status, limits_hit, self.journal.seq)
        self.write_notebook()

    def kernel_restarted(self, reason: str, variables_gone: list[str] | None) -> None:
        self._write("kernel-restarted", sync=True, reason=reason, variables_gone=variables_gone)
        self.write_notebook()

    def kernel_attached(self, sandbox: dict[str, Any]) -> None:
        """A sandbox started and its kernel is connected (``sandbox``: its description)."""
        self.event("kernel-attached", sandbox=sandbox)
        start = sandbox.get("start")
        self.telemetry.sandbox_started(start if isinstance(start, dict) else {})

    def late_output(self, cell: CellRecord, output: dict[str, Any]) -> None:
        """Output that work a cell started printed after the cell ended (journal only: the caller
        rewrites the notebook at a bounded rate, and every cell's end rewrites it too)."""
        self._write("late-output", msg_id=cell.msg_id, output=output)

    def cell_aborted(self, cell: CellRecord) -> None:
        self._write("cell-aborted", msg_id=cell.msg_id)

    def event(self, event: str, *, sync: bool | None = None, **data: Any) -> None:
        """Any other record (an extension's too, see ``audit.events``); ``sync`` defaults to SYNCED_EVENTS."""
        self._write(event, sync=event in SYNCED_EVENTS if sync is None else sync, **data)

    # -- rendering
    def notebook(self) -> NotebookNode:
        with self._lock:
            return self.reducer.notebook(self.journal.path.name)

    def write_notebook(self) -> None:
        with self._lock:
            text = self._text.render(self.reducer, self.journal.path.name)
        # The journal is the durable record (fsync'd at each cell's end) and
        # `cellgate recover` renders the notebook from it, so the notebook is
        # replaced atomically after every cell but not fsync'd each time.
        write_atomically(self.notebook_path, text, durable=False)

    def close(self, ending: str = "session-ended", **data: Any) -> None:
        """End the record: ``session-ended``, or ``session-paused`` when its kernel lives on as a checkpoint."""
        try:
            self.event(ending, **data)
        except JournalError:
            pass
        finally:
            self.telemetry.session_ended()
        try:
            self.write_notebook()
            nbformat.validate(nbformat.reads(self.notebook_path.read_text(encoding="utf-8"), as_version=4))
        finally:
            self.journal.close()
            self.blobs.close()

    # -- what the relay and the dispatcher ask
    def unwritable(self) -> str | None:
        """Why the journal cannot be written (it refuses every write from then on), or None."""
        return self.journal.broken

    def cell(self, msg_id: str) -> CellRecord | None:
        """The cell the frontend sent as ``msg_id``, if this session recorded it."""
        return self.reducer.by_id.get(msg_id)


# CellRecord, output_dict, Reducer and rebuild are imported from here by the session and the CLI.
__all__ = ["INLINE_RESULT_BYTES", "CellRecord", "Recorder", "Reducer", "journal_path", "output_dict", "rebuild"]
