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

Each line also carries ``mac``, an HMAC of the record's hash under the host
key (``hostkey``, kept outside every run folder). The hash chains the records;
the MAC makes the chain unforgeable without the key: an edited record that is
re-hashed, and every record after it, no longer verifies. It costs one HMAC
of 32 bytes per record. The session-started record names the key's id.

Reading is bounded: only a regular file, streamed line by line, each line
capped at ``MAX_RECORD_BYTES``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import JournalError
from cellgate.gate._faults import failpoint
from cellgate.gate._json import canonical_json, digest, sha256_hex, utcnow
from cellgate.gate.audit.artifacts import open_regular
from cellgate.gate.audit.owned import open_owned

GENESIS = "0" * 64
MAC_PURPOSE = "journal-record"
MAX_RECORD_BYTES = 64 << 20  # far above any record cellgate writes (outputs are capped per cell)


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


def record_hash(record: dict[str, Any]) -> str:
    """sha256 of the record's canonical JSON without its ``hash`` and ``mac`` fields."""
    body = {k: v for k, v in record.items() if k not in ("hash", "mac")}
    return digest(body)


def record_mac(key: hostkey.HostKey, record_hash_hex: str) -> str:
    return key.mac(bytes.fromhex(record_hash_hex), MAC_PURPOSE)


def integrity(key: hostkey.HostKey) -> dict[str, str]:
    """What a session's metadata says about how its journal is signed."""
    return {"key_id": key.key_id, "mac": "HMAC-SHA256 of each journal record's hash with the host key"}


class Journal:
    def __init__(self, path: Path, key: hostkey.HostKey | None = None) -> None:
        self.path = path
        self.key = key or hostkey.load()
        self._lock = threading.Lock()
        self.broken: str | None = None
        self.seq, self.head = 0, GENESIS
        self.synced = 0
        if path.exists():  # continue an existing journal (e.g. after `cellgate recover`)
            found = read_journal(path, self.key)
            if found.problem:
                raise JournalError(f"{path}: {found.problem}; refusing to append to it")
            if found.records:
                self.seq, self.head = found.records[-1]["seq"], found.records[-1]["hash"]
            if found.torn_tail:  # drop the cut-short write so new records follow a whole line
                os.truncate(path, found.valid_bytes)
        fd = open_owned(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "the journal")  # 0600: the owner's alone
        self._file = open(fd, "a", encoding="utf-8")

    def append(self, event: str, sync: bool = False, **data: Any) -> dict[str, Any]:
        """Write one record (fsync'd if ``sync``); raises JournalError once broken."""

        with self._lock:
            if self.broken:
                raise JournalError(f"the audit journal {self.path} cannot be written: {self.broken}")
            record = {"seq": self.seq + 1, "time": utcnow(), "event": event, **data, "prev": self.head}
            try:
                text = canonical_json(record)
                text.encode()
            except (ValueError, TypeError):  # kernel-supplied text with a lone surrogate, NaN and the like
                record = json_safe(record)
                text = canonical_json(record)
            # The line is the canonical text the hash is taken over, with the hash added last.
            record["hash"] = sha256_hex(text)
            record["mac"] = record_mac(self.key, record["hash"])
            line = f'{text[:-1]},"hash":"{record["hash"]}","mac":"{record["mac"]}"}}\n'
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
                try:  # a record a full disk refused is still in the buffer: closing retries it (and closes the fd)
                    self._file.close()
                except OSError:
                    pass


@dataclass
class JournalRead:
    records: list[dict[str, Any]]
    torn_tail: bool  # the last line was incomplete (a crash mid-write) and was ignored
    problem: str | None  # the first place where the chain is broken, if any
    valid_bytes: int = 0  # length of the file's prefix that holds ``records``


def _declared_key(record: dict[str, Any]) -> str | None:
    metadata = record.get("metadata") if record.get("event") == "session-started" else None
    found = (metadata or {}).get("integrity") if isinstance(metadata, dict) else None
    return str(found.get("key_id")) if isinstance(found, dict) and found.get("key_id") else None


def _unsigned(record: dict[str, Any], index: int, key: hostkey.HostKey | None) -> str | None:
    """Why a record's MAC does not check out with ``key`` (None if it does, or no key is asked for)."""
    if key is None:
        return None
    declared = _declared_key(record) if index == 0 else None
    if declared and declared != key.key_id:
        return (f"the journal is signed with host key {declared}; this host's key is {key.key_id} ({key.path}): "
                f"verify it on the host that recorded it, or point ${hostkey.ENV_VAR} at that key")
    mac = record.get("mac")
    if not isinstance(mac, str):
        return (f"journal record {index + 1} (seq {record.get('seq')}) is not signed: the journal was written "
                "without keyed integrity, or its MACs were removed; it cannot be verified")
    if not key.check(bytes.fromhex(record["hash"]), MAC_PURPOSE, mac):
        return (f"journal record {index + 1} (seq {record.get('seq')}) is not signed by this host's key "
                f"{key.key_id}: it was edited and re-hashed without the key, or written with another key")
    return None


def _lines(fd: int, max_line: int) -> Iterator[tuple[bytes | None, bool]]:
    """(line, ends with a newline) for each line of ``fd`` (closed at the end); (None, False) for a line
    longer than ``max_line``, after which nothing more is read. Memory stays near ``max_line``."""
    buffer = bytearray()
    with os.fdopen(fd, "rb", buffering=0) as raw:
        while True:
            chunk = raw.read(1 << 20)
            if not chunk:
                if buffer:
                    yield (bytes(buffer), False) if len(buffer) <= max_line else (None, False)
                return
            buffer += chunk
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                if end - start > max_line:
                    yield None, False
                    return
                with memoryview(buffer) as view:
                    line = bytes(view[start:end + 1])
                yield line, True
                start = end + 1
            del buffer[:start]
            if len(buffer) > max_line:
                yield None, False
                return


def read_journal(source: Path | int, key: hostkey.HostKey | None = None,
                 max_line: int = MAX_RECORD_BYTES) -> JournalRead:
    """Read a journal, checking every record's hash, the chain between them and, with ``key``, their MACs.

    ``source`` is a path or an open fd (then closed here). Only a regular file
    is read, line by line; a line longer than ``max_line`` is a problem, not a
    reason to keep reading.
    """
    fd = source if isinstance(source, int) else open_regular(Path(source), "the journal")
    records: list[dict[str, Any]] = []
    prev = GENESIS
    valid = 0
    index = 0
    for raw, complete in _lines(fd, max_line):
        if raw is None:
            return JournalRead(records, False, f"journal record {index + 1} is longer than {max_line:,} bytes: "
                                               "the file is not a cellgate journal or was damaged", valid)
        try:
            record = json.loads(raw)
            ok = isinstance(record, dict) and record.get("hash") == record_hash(record)
        except (ValueError, UnicodeDecodeError):
            ok = False
        if not ok:
            if not complete:
                return JournalRead(records, True, None, valid)  # a write cut short by a crash
            return JournalRead(records, False, f"journal record {index + 1} does not match its hash: "
                                               "it was edited or damaged", valid)
        if record.get("prev") != prev or record.get("seq") != len(records) + 1:
            return JournalRead(records, not complete, f"journal record {index + 1} (seq {record.get('seq')}) "
                               "does not follow the one before it: a record was deleted, inserted or reordered",
                               valid)
        problem = _unsigned(record, index, key)
        if problem:
            return JournalRead(records, not complete, problem, valid)
        if not complete:  # a whole record without its newline: the crash cut only the newline
            return JournalRead(records, True, None, valid)
        records.append(record)
        prev = record["hash"]
        valid += len(raw)
        index += 1
    return JournalRead(records, False, None, valid)


def iter_events(records: list[dict[str, Any]], *kinds: str) -> Iterator[dict[str, Any]]:
    return (r for r in records if r["event"] in kinds)


__all__ = ["Journal", "JournalError", "JournalRead", "integrity", "read_journal", "record_hash", "record_mac",
           "json_safe", "failpoint"]
