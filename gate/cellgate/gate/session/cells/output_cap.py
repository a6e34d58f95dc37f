"""One cell's output within ``[sandbox] output_limit_kb``: the head as it comes, the tail at the end, a marker between.

Up to half the limit is recorded as it arrives; past that the newest half is
held back, and what falls out of it is dropped, counted and digested. When the
cell ends, a marker with the dropped size and sha256 is recorded, then the tail.
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import Callable
from typing import Any

Output = dict[str, Any]


class OutputCap:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.recorded_bytes = 0
        self.tail: collections.deque[tuple[Output, int]] = collections.deque()
        self.tail_bytes = 0
        self.dropped_bytes = 0
        self.dropped_digest = hashlib.sha256()

    def take(self, output: Output, record: Callable[[Output], None]) -> None:
        """Record ``output`` now (within the head) or hold it in the tail."""
        size = len(json.dumps(output, ensure_ascii=False))
        half = self.limit // 2
        if not self.tail and not self.dropped_bytes and self.recorded_bytes + size <= half:
            self.recorded_bytes += size
            record(output)
            return
        self.tail.append((output, size))
        self.tail_bytes += size
        while self.tail_bytes > half:
            old, old_size = self.tail.popleft()
            self.tail_bytes -= old_size
            self.dropped_bytes += old_size
            self.dropped_digest.update(json.dumps(old, ensure_ascii=False, sort_keys=True).encode())

    def drop_unread(self, body: bytes) -> None:
        """An output too large to parse: counted and digested as dropped, never parsed."""
        self.dropped_bytes += len(body)
        self.dropped_digest.update(body)

    def flush(self, record: Callable[[Output], None]) -> bool:
        """The cell ended: record the marker (if anything was dropped) and the tail; True if output was cut."""
        cut = bool(self.dropped_bytes)
        if cut:
            note = (f"[output truncated: {self.dropped_bytes} bytes dropped, "
                    f"sha256={self.dropped_digest.hexdigest()}; the cell printed more than the "
                    f"{self.limit} byte output limit]\n")
            record({"output_type": "stream", "name": "stderr", "text": note})
        while self.tail:
            record(self.tail.popleft()[0])
        return cut
