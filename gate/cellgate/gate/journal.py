"""The write-ahead journal: the system of record of a session.

Append-only JSONL (``<name>.journal.jsonl``), one record per event, each with
a sequence number, the host's time, the hash of the previous record and its
own hash (sha256 of its canonical JSON without the ``hash`` field), so a torn
tail is detected and ignored, and an edited, deleted or reordered record
breaks the chain at that exact place.

Records that precede a side effect (a tool call's intent) and records that
end something (a call, a cell) are fsync'd before the gate goes on. If the
journal cannot be written it becomes ``broken`` and the gate refuses every
further call (fail closed).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .faults import failpoint

GENESIS = "0" * 64


class JournalError(OSError):
    """The journal could not be written: no further side effects may run."""


def json_safe(value: Any) -> Any:
    """Make kernel-supplied data writable as strict UTF-8 JSON (lone surrogates, NaN)."""
    if isinstance(value, str):
        if value.isascii():
            return value  # no copy: most output is ASCII, and a large one must not be held twice
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def record_hash(record: dict[str, Any]) -> str:
    """sha256 of the record's canonical JSON without its ``hash`` field."""
    return hashlib.sha256(_canonical({k: v for k, v in record.items() if k != "hash"}).encode()).hexdigest()


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.broken: str | None = None
        self.seq, self.head = 0, GENESIS
        self.synced = 0
        if path.exists():  # continue an existing journal (e.g. after `cellgate recover`)
            found = read_journal(path)
            if found.problem:
                raise JournalError(f"{path}: {found.problem}; refusing to append to a damaged journal")
            if found.records:
                self.seq, self.head = found.records[-1]["seq"], found.records[-1]["hash"]
            if found.torn_tail:  # drop the cut-short write so new records follow a whole line
                os.truncate(path, found.valid_bytes)
        self._file = open(path, "a", encoding="utf-8")

    def append(self, event: str, sync: bool = False, **data: Any) -> dict[str, Any]:
        """Write one record (fsync'd if ``sync``); raises JournalError once broken."""
        from .gate import utcnow

        with self._lock:
            if self.broken:
                raise JournalError(f"the audit journal {self.path} cannot be written: {self.broken}")
            record = {"seq": self.seq + 1, "time": utcnow(), "event": event, **data, "prev": self.head}
            try:
                text = _canonical(record)
                text.encode()
            except (ValueError, TypeError):  # kernel-supplied text with a lone surrogate, NaN and the like
                record = json_safe(record)
                text = _canonical(record)
            # The line is the canonical text the hash is taken over, with the hash added last.
            record["hash"] = hashlib.sha256(text.encode()).hexdigest()
            line = f'{text[:-1]},"hash":"{record["hash"]}"}}\n'
            try:
                self._file.write(line)
                self._file.flush()
                if sync:
                    os.fsync(self._file.fileno())
            except (OSError, ValueError) as exc:
                self.broken = f"{type(exc).__name__}: {exc}"
                raise JournalError(f"the audit journal {self.path} cannot be written: {self.broken}") from None
            self.seq, self.head = record["seq"], record["hash"]
            if sync:
                self.synced = self.seq
            return record

    def sync(self) -> int:
        """fsync everything written so far; returns the last durable seq (group commit)."""
        with self._lock:
            target = self.seq
            if self.synced >= target:
                return self.synced
            fd = self._file.fileno()
        try:
            os.fsync(fd)
        except OSError as exc:
            self.broken = f"{type(exc).__name__}: {exc}"
            raise JournalError(f"the audit journal {self.path} cannot be written: {self.broken}") from None
        with self._lock:
            self.synced = max(self.synced, target)
            return self.synced

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                try:
                    self._file.flush()
                    os.fsync(self._file.fileno())
                except OSError:
                    pass
                self._file.close()


@dataclass
class JournalRead:
    records: list[dict[str, Any]]
    torn_tail: bool  # the last line was incomplete (a crash mid-write) and was ignored
    problem: str | None  # the first place where the chain is broken, if any
    valid_bytes: int = 0  # length of the file's prefix that holds ``records``


def read_journal(path: Path) -> JournalRead:
    """Read a journal, checking every record's hash and the chain between them."""
    data = path.read_bytes()
    incomplete = bool(data) and not data.endswith(b"\n")
    lines = data.split(b"\n")
    if not incomplete:
        lines = lines[:-1]
    records: list[dict[str, Any]] = []
    prev = GENESIS
    valid = 0
    for index, raw in enumerate(lines):
        try:
            record = json.loads(raw)
            ok = isinstance(record, dict) and record.get("hash") == record_hash(record)
        except (ValueError, UnicodeDecodeError):
            ok = False
        if not ok:
            if index == len(lines) - 1 and incomplete:
                return JournalRead(records, True, None, valid)  # a write cut short by a crash
            return JournalRead(records, incomplete, f"journal record {index + 1} does not match its hash: "
                                                    "it was edited or damaged", valid)
        if record.get("prev") != prev or record.get("seq") != len(records) + 1:
            return JournalRead(records, incomplete, f"journal record {index + 1} (seq {record.get('seq')}) does "
                                                    "not follow the one before it: a record was deleted, inserted "
                                                    "or reordered", valid)
        records.append(record)
        prev = record["hash"]
        valid += len(raw) + 1
    return JournalRead(records, False, None, valid)


def iter_events(records: list[dict[str, Any]], *kinds: str) -> Iterator[dict[str, Any]]:
    return (r for r in records if r["event"] in kinds)


__all__ = ["Journal", "JournalError", "JournalRead", "read_journal", "record_hash", "json_safe", "failpoint"]
