"""What the kernel prints survives its death; what IOPub loses is counted.

IOPub is asynchronous: a line printed with ``flush=True`` is handed to a
ZeroMQ thread, and a kernel killed right then (SIGKILL, a segfault, the
cgroup's OOM kill) takes it along. So stream output is also written, before
it is sent on IOPub, to a file in the kernel's socket folder, which is
host-backed: a write that returned is on the host. The host reads it only
when the kernel died, and records what IOPub never delivered.

Each record is one JSON line: the cell (``p``, the parent msg_id), the
stream (``n``), the offset of this text in that cell's stream (``o``,
characters) and the text (``t``). The file is bounded: past
``OUTPUT_LOG_BYTES`` it starts over (the offsets say what is missing).

Every IOPub message also carries a number (``metadata.cellgate_seq``), so the
host can count messages that never arrived.

Imports nothing from the gate: this runs inside the sandbox.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import threading
from typing import Any

from .wire import OUTPUT_LOG_BYTES, SEQ_KEY

FLUSH_AT_BYTES = 8 << 10


def _parent_id(parent: Any) -> str:
    header = parent.get("header", parent) if isinstance(parent, dict) else {}
    msg_id = header.get("msg_id") if isinstance(header, dict) else None
    return msg_id if isinstance(msg_id, str) else ""


class OutputLog:
    """Appends the text of ipykernel's stdout/stderr to a host-backed file, before IOPub sends it."""

    def __init__(self, path: str, limit: int = OUTPUT_LOG_BYTES) -> None:
        self.path = path
        self.limit = limit
        self._fd: int | None = None
        self._size = 0
        self._lock = threading.Lock()
        self._pending: list[tuple[tuple[str, str], int, list[str]]] = []  # (cell, stream), offset, texts
        self._pending_bytes = 0
        self._offsets: dict[tuple[str, str], int] = {}
        self._broken = False

    def wrap(self, stream: Any) -> None:
        """Log each write; write the log out on flush and before ipykernel sends the stream on IOPub."""
        write, flush = stream.write, stream.flush
        name = str(getattr(stream, "name", "stdout"))

        def logged_write(text: str) -> int:
            written = write(text)
            if isinstance(text, str) and text:
                self.note(_parent_id(getattr(stream, "parent_header", {})), name, text)
            return int(written or 0)

        def logged_flush() -> None:
            self.sync()
            flush()

        def before_send(msg: Any) -> Any:  # runs on the IOPub thread, just before each stream message is sent
            self.sync()
            return msg

        stream.write = logged_write
        stream.flush = logged_flush
        # ipykernel keeps hooks per thread and sends from its IOPub thread: register there.
        pub_thread: Any = getattr(stream, "pub_thread", None)
        if hasattr(stream, "register_hook") and hasattr(pub_thread, "schedule"):
            pub_thread.schedule(lambda: stream.register_hook(before_send))

    def note(self, parent: str, name: str, text: str) -> None:
        with self._lock:
            key = (parent, name)
            offset = self._offsets.get(key, 0)
            self._offsets[key] = offset + len(text)
            if len(self._offsets) > 256:  # cells long gone: their offsets are not needed any more
                self._offsets.pop(next(iter(self._offsets)))
            last = self._pending[-1] if self._pending else None
            if last is not None and last[0] == key:  # consecutive writes of one stream: one record
                last[2].append(text)
            else:
                self._pending.append((key, offset, [text]))
            self._pending_bytes += len(text)
            full = self._pending_bytes >= FLUSH_AT_BYTES
        if full:
            self.sync()

    def sync(self) -> None:
        """Write what was noted to the file now (a write that returned is on the host)."""
        with self._lock:
            if not self._pending or self._broken:
                self._pending.clear()
                self._pending_bytes = 0
                return
            data = "".join(json.dumps({"p": parent, "n": name, "o": offset, "t": "".join(parts)}, ensure_ascii=False)
                           + "\n" for (parent, name), offset, parts in self._pending).encode("utf-8", "replace")
            self._pending.clear()
            self._pending_bytes = 0
            try:
                if self._fd is None:
                    # Not following a link nor waiting on a FIFO a cell put at its name: a log that is not a
                    # regular file is a broken log (IOPub is still the record).
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                                       | os.O_CLOEXEC, 0o600)
                    if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                        os.close(self._fd)
                        self._fd = None
                        raise OSError("the output log is not a regular file")
                    os.set_blocking(self._fd, True)
                    self._size = os.fstat(self._fd).st_size  # a reopened log (``close``) may hold records
                if self._size + len(data) > self.limit:  # start over; the offsets tell the host what is gone
                    os.ftruncate(self._fd, 0)
                    self._size = 0
                    data = data[-self.limit:]
                    data = data[data.find(b"\n") + 1:] if len(data) == self.limit else data
                os.write(self._fd, data)
                self._size += len(data)
            except OSError:
                self._broken = True  # e.g. the folder is full: IOPub is still the record

    def close(self) -> None:
        """Write out what is pending and close the file (a pause: ``hibernate``); the next write reopens it."""
        self.sync()
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def number_iopub(session: Any, iopub: tuple[Any, ...]) -> None:
    """Give every message sent on IOPub a number in its (signed) metadata."""
    send = session.send
    counter = itertools.count(1)
    lock = threading.Lock()

    def numbered_send(stream: Any, msg_or_type: Any, content: Any = None, parent: Any = None, ident: Any = None,
                      buffers: Any = None, track: bool = False, header: Any = None, metadata: Any = None) -> Any:
        if any(stream is s for s in iopub):
            with lock:
                seq = next(counter)
            if isinstance(msg_or_type, dict):
                msg_or_type = dict(msg_or_type)
                msg_or_type["metadata"] = {**(msg_or_type.get("metadata") or {}), SEQ_KEY: seq}
            else:
                metadata = {**(metadata or {}), SEQ_KEY: seq}
        return send(stream, msg_or_type, content, parent, ident, buffers, track, header, metadata)

    session.send = numbered_send
