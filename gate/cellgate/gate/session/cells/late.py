"""Output that work of an ended cell printed later (a thread): kept with that cell, bounded.

Per ended cell at most ``LATE_OUTPUT_BYTES`` and ``LATE_OUTPUT_COUNT`` outputs
are recorded, then one marker; past the caps an output is only counted, never
converted (converting and validating it is what costs the host). The notebook
is rewritten for late output at most once per ``LATE_REWRITE_INTERVAL`` (and
at every cell's end anyway), never once per output.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable
from typing import Any

from cellgate.gate.audit.recorder import Recorder, output_dict

LATE_OUTPUT_BYTES = 64 << 10  # per ended cell
LATE_OUTPUT_COUNT = 100  # per ended cell
LATE_REWRITE_INTERVAL = 2.0  # seconds


class LateOutput:
    def __init__(self, recorder: Recorder, on_error: Callable[[Exception], None]) -> None:
        self.recorder = recorder
        self._on_error = on_error
        self._bytes: dict[str, int] = {}
        self._counts: collections.Counter[str] = collections.Counter()
        self._rewrite: asyncio.TimerHandle | None = None
        self._rewritten = 0.0

    def add(self, loop: asyncio.AbstractEventLoop, parent_id: str, msg: dict[str, Any]) -> None:
        """An output message whose parent is not the running cell."""
        cell = self.recorder.cell(parent_id)
        if cell is None or cell.status is None:
            return
        self._counts[parent_id] += 1
        count = self._counts[parent_id]
        spent = self._bytes.get(parent_id, 0)
        if spent > LATE_OUTPUT_BYTES or count > LATE_OUTPUT_COUNT + 1:
            return
        output = output_dict(msg)
        size = len(json.dumps(output, ensure_ascii=False))
        self._bytes[parent_id] = spent + size
        if spent + size <= LATE_OUTPUT_BYTES and count <= LATE_OUTPUT_COUNT:
            self.recorder.late_output(cell, output)
        else:
            self._bytes[parent_id] = LATE_OUTPUT_BYTES + 1  # one marker, then nothing
            self.recorder.late_output(cell, {"output_type": "stream", "name": "stderr", "text":
                                             f"[late output over {LATE_OUTPUT_BYTES} bytes or {LATE_OUTPUT_COUNT} "
                                             "outputs: the rest was dropped]\n"})
        self._rewrite_soon(loop)

    def unread(self, parent_id: str, size: int) -> None:
        """A late output too large to parse: it counts against the cell's bytes."""
        self._bytes[parent_id] = self._bytes.get(parent_id, 0) + size

    def _rewrite_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._rewrite is None:
            delay = max(0.0, self._rewritten + LATE_REWRITE_INTERVAL - loop.time())
            self._rewrite = loop.call_later(delay, self._rewrite_now, loop)

    def _rewrite_now(self, loop: asyncio.AbstractEventLoop) -> None:
        self._rewrite = None
        self._rewritten = loop.time()
        try:
            self.recorder.write_notebook()
        except Exception as exc:
            self._on_error(exc)

    def close(self) -> None:
        """The recorder's own close writes the notebook: a pending rewrite is not needed."""
        if self._rewrite is not None:
            self._rewrite.cancel()
