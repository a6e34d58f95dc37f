"""What the host knows about the kernel's output beyond what IOPub delivered (see cellgate.kernel.outlog).

- Every IOPub message carries a number; numbers that never arrive are
  counted, and a cell's record says "N output messages lost" at its end.
- The kernel also writes its stream output to ``output.log`` in its socket
  folder before sending it; when the kernel dies, the host reads that file
  (bounded, never following a link: the folder is the sandbox's) and records
  the text of the running cell that IOPub had not delivered.

Both are the kernel's own account, as the IOPub messages are: they recover
benign losses, they prove nothing about a kernel that lies.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from cellgate.kernel.wire import OUTPUT_LOG_BYTES, SEQ_KEY

READ_LIMIT = 2 * OUTPUT_LOG_BYTES  # a bigger file is the sandbox's doing: only its head is read
MAX_HOLES = 4096  # missing numbers remembered one by one; beyond that they are only counted
MAX_GAP = 1 << 20  # a jump past this is not a loss but a kernel numbering wildly: counted once, not stored


class OutputLedger:
    """One kernel's IOPub numbering and output log, as the host sees them."""

    def __init__(self, log_path: Path | None) -> None:  # None: the host cannot read the kernel's log
        self.log_path = log_path
        self._last: int | None = None  # the highest number seen
        self._holes: set[int] = set()
        self._lost = 0  # numbers known lost and not yet reported
        self._received: dict[str, int] = {}  # stream name -> characters received for the cell below
        self._cell = ""

    # ------------------------------------------------------ numbering
    def seen(self, msg: dict[str, Any]) -> None:
        metadata = msg.get("metadata")
        seq = metadata.get(SEQ_KEY) if isinstance(metadata, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
            return
        if self._last is None:
            self._last = seq  # what the kernel sent before the host listened is not lost
            return
        if seq <= self._last:
            self._holes.discard(seq)  # a late arrival, or a repeat
            return
        gap = seq - self._last - 1
        if gap > MAX_GAP:
            self._lost += 1
        elif gap:
            missing = range(self._last + 1, seq)
            room = max(0, MAX_HOLES - len(self._holes))
            self._holes.update(missing[:room])
            self._lost += max(0, gap - room)
        self._last = seq

    def lost(self) -> int:
        """Messages lost since the last call: numbers still missing when a cell ends or the kernel dies.

        Everything a cell sent is sent before its idle status, so at its end a
        missing number is a lost message (a thread the cell started may, rarely,
        still have one on its way: that one is counted too).
        """
        count = self._lost + len(self._holes)
        self._holes.clear()
        self._lost = 0
        return count

    # ------------------------------------------------------ stream text
    def received(self, cell: str, output: dict[str, Any]) -> None:
        """A stream output of ``cell`` that IOPub delivered."""
        if output.get("output_type") != "stream":
            return
        if cell != self._cell:
            self._cell, self._received = cell, {}
        name = str(output.get("name"))
        text = output.get("text")
        self._received[name] = self._received.get(name, 0) + (len(text) if isinstance(text, str) else 0)

    def recover(self, cell: str) -> list[dict[str, Any]]:
        """The stream output of ``cell`` in the kernel's log that IOPub never delivered, as outputs."""
        if cell != self._cell:
            self._cell, self._received = cell, {}
        records = self._read()
        outputs: list[dict[str, Any]] = []
        recovered = skipped = 0
        for record in records:
            if record.get("p") != cell or record.get("n") not in ("stdout", "stderr"):
                continue
            name, offset, text = record["n"], record.get("o"), record.get("t")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or not isinstance(text, str):
                continue
            have = self._received.get(name, 0)
            if offset + len(text) <= have:
                continue
            if offset > have:
                skipped += offset - have  # the log had started over past it
            self._received[name] = offset + len(text)
            text = text[max(0, have - offset):]
            recovered += len(text)
            if outputs and outputs[-1]["name"] == name:
                outputs[-1]["text"] += text
            else:
                outputs.append({"output_type": "stream", "name": name, "text": text})
        if recovered:
            note = (f"[cellgate: the kernel died; {recovered} characters it had written were recovered from its "
                    "output log (IOPub had not delivered them)"
                    + (f"; {skipped} characters before them are lost" if skipped else "") + "]\n")
            outputs.append({"output_type": "stream", "name": "stderr", "text": note})
        return outputs

    def _read(self) -> list[dict[str, Any]]:
        if self.log_path is None:
            return []
        try:
            fd = os.open(self.log_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return []
            data = os.read(fd, READ_LIMIT)
        except OSError:
            return []
        finally:
            os.close(fd)
        records = []
        for line in data.split(b"\n"):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a torn last line, or garbage the sandbox wrote
            if isinstance(record, dict):
                records.append(record)
        return records


async def settle(sock: zmq.asyncio.Socket | None, seconds: float = 1.0) -> None:
    """Give the IOPub pump the messages that had already arrived when the kernel died."""
    if sock is None or sock.closed:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    quiet = 0
    while quiet < 3 and loop.time() < deadline:
        try:
            pending = bool(int(sock.get(zmq.EVENTS)) & zmq.POLLIN)
        except zmq.ZMQError:
            return
        quiet = 0 if pending else quiet + 1
        await asyncio.sleep(0.02)  # the pump runs on this loop: let it take them
