"""The audit trail: a write-ahead journal and the notebook rendered from it.

The journal (``<name>.journal.jsonl``) is appended and fsync'd event by event;
the notebook is rewritten atomically (temp file, fsync, rename, fsync of the
folder) whenever a cell ends, so a crash never leaves a truncated notebook.
The notebook is never signed or marked trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, output_from_msg

from .gate import CallRecord, canonical_json, utcnow

CellStatus = Literal["ok", "error", "interrupted", "timeout", "killed", "rejected"]

INLINE_RESULT_BYTES = 2048


def _json_safe(value: Any) -> Any:
    """Make kernel-supplied data writable as strict UTF-8 JSON (lone surrogates, NaN)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)
    if isinstance(value, dict):
        return {_json_safe(str(k)): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


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
    calls: list[CallRecord] = field(default_factory=list)
    limits_hit: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None

    def add_output(self, msg: dict[str, Any]) -> None:
        msg_type = msg["header"]["msg_type"]
        if msg_type == "clear_output":
            self.outputs.clear()
            return
        output = output_from_msg(_json_safe(msg))
        if msg_type == "stream" and self.outputs and self.outputs[-1].get("output_type") == "stream" \
                and self.outputs[-1].get("name") == output.get("name"):
            self.outputs[-1]["text"] += output["text"]  # merge consecutive stream chunks
        else:
            self.outputs.append(output)

    def as_cell(self) -> Any:
        cell = new_code_cell(source=self.source, execution_count=self.execution_count)
        cell.outputs = list(self.outputs)
        calls = sorted(self.calls, key=lambda c: c.seq)
        cell.metadata["cellgate"] = {
            "sha256": hashlib.sha256(self.source.encode()).hexdigest(),
            "started": self.started,
            "ended": self.ended,
            "status": self.status,
            "limits_hit": list(self.limits_hit),
            "calls": [c.as_metadata(INLINE_RESULT_BYTES) for c in calls],
        }
        if self.silent:
            cell.metadata["cellgate"]["silent"] = True
        if self.error:
            cell.metadata["cellgate"]["error"] = self.error
        return cell


class Journal:
    """Append-only JSONL, fsync'd per record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seq = 0
        self._file = open(path, "a", encoding="utf-8")

    def write(self, event: str, **data: Any) -> None:
        with self._lock:
            self._seq += 1
            record = {"seq": self._seq, "time": utcnow(), "event": event, **_json_safe(data)}
            self._file.write(json.dumps(record, ensure_ascii=False, allow_nan=False, default=str) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()


def write_atomically(path: Path, text: str) -> None:
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class Recorder:
    """Keeps a session's cells and writes its journal and notebook."""

    def __init__(self, notebook_path: Path, session_metadata: dict[str, Any]) -> None:
        self.notebook_path = notebook_path
        notebook_path.parent.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(notebook_path.with_name(notebook_path.stem + ".journal.jsonl"))
        self.metadata = session_metadata
        self.cells: list[CellRecord] = []
        self._lock = threading.Lock()
        self.journal.write("session-started", metadata=session_metadata)
        self.write_notebook()

    def cell_started(self, cell: CellRecord) -> None:
        with self._lock:
            self.cells.append(cell)
        self.journal.write("cell-sent", msg_id=cell.msg_id, source=cell.source, silent=cell.silent)

    def cell_ended(self, cell: CellRecord) -> None:
        self.journal.write(
            "cell-ended", msg_id=cell.msg_id, status=cell.status, limits_hit=cell.limits_hit,
            execution_count=cell.execution_count, outputs=cell.outputs,
        )
        self.write_notebook()

    def call_finished(self, cell: CellRecord | None, record: CallRecord) -> None:
        if cell is not None:
            with self._lock:
                cell.calls.append(record)
        entry = record.as_metadata(inline_limit=1 << 62)
        self.journal.write("call", cell=cell.msg_id if cell else None, call=entry)

    def event(self, event: str, **data: Any) -> None:
        self.journal.write(event, **data)

    def notebook(self) -> Any:
        nb = new_notebook()
        nb.metadata["kernelspec"] = {"name": "cellgate", "display_name": "cellgate (gVisor)", "language": "python"}
        nb.metadata["language_info"] = {"name": "python"}
        nb.metadata["cellgate"] = _json_safe(self.metadata)
        with self._lock:
            nb.cells = [c.as_cell() for c in self.cells if c.status is not None]
        return nb

    def write_notebook(self) -> None:
        nb = self.notebook()
        nbformat.validate(nb)
        write_atomically(self.notebook_path, nbformat.writes(nb))

    def close(self) -> None:
        self.write_notebook()
        self.journal.write("session-ended")
        self.journal.close()
