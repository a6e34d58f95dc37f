"""The kernel's heap: kept while cells run, given back once the kernel is idle.

Inside gVisor the first touch of every page is a fault the sentry handles (about 6 µs here, against ~2 µs
natively), and Python's own allocator hands each emptied 1 MiB arena straight back with ``munmap``: every large
tool result (10 MB of JSON is ~50 MB of Python objects, plus the decoder's own document) was decoded into pages
faulted in anew, half of its time. So the sandbox's environment (``gate.sandbox.environment``) runs the
interpreter on glibc's malloc (``PYTHONMALLOC=malloc``) with thresholds that keep freed memory in the heap. Kept
for good, that memory would stay with an idle sandbox; so ``IdleTrim`` gives it back (``malloc_trim``) a few
seconds after the last cell ends, and an idle session costs the host what it did.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
from typing import Any

IDLE_TRIM_AFTER = 3.0  # seconds without a cell before the heap is trimmed


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library, or the interpreter's own allocator in use)."""
    if os.environ.get("PYTHONMALLOC") != "malloc":
        return None
    return getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own C library


class IdleTrim:
    """``cell_started`` / ``cell_ended`` around every cell; the trim runs on the shell's event loop when no cell
    ran for ``after`` seconds (it takes ~30 ms for a heap that held a 10 MB result, only ever while idle)."""

    def __init__(self, after: float = IDLE_TRIM_AFTER) -> None:
        self.after = after
        self._trim = _malloc_trim()
        self._pending: asyncio.TimerHandle | None = None
        self.trims = 0  # how many ran (read by tests)

    def cell_started(self) -> None:
        self._cancel()

    def cell_ended(self) -> None:
        if self._trim is None:
            return
        self._cancel()
        self._pending = asyncio.get_running_loop().call_later(self.after, self._run)

    def _cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _run(self) -> None:
        self._pending = None
        self._trim(0)
        self.trims += 1


__all__ = ["IDLE_TRIM_AFTER", "IdleTrim"]
