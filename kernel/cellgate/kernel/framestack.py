"""Room for Python frames, so a hot loop never sits on the edge of CPython's frame chunks.

CPython (3.11+) keeps Python frames in 16 KiB chunks and unmaps a chunk as
soon as the frame at its base returns, so a loop whose calls cross a chunk's
edge maps and unmaps memory on every call. Natively that is cheap; in gVisor
each mmap/munmap is a trip through the sentry. Measured in the sandbox: one
parso parse took 17 s at one call depth and 0.06 s at the depths around it,
and the first Tab completion (jedi parsing ``typing_extensions`` at such an
edge) took 20-120 s instead of 4 s.

A frame with ``ROOMY_FRAME_SLOTS`` stack slots makes CPython give it a
512 KiB chunk (virtual memory, touched only as used): everything called from
it has ~250 KiB of room, past the recursion limit for ordinary frames,
before the next edge. The kernel's main thread and every thread started
after it run from such a frame.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

ROOMY_FRAME_SLOTS = 1 << 15

T = TypeVar("T")


def _call(function: Callable[[], Any]) -> Any:
    return function()


_roomy_call = types.FunctionType(_call.__code__.replace(co_stacksize=ROOMY_FRAME_SLOTS), {})


def with_roomy_stack(function: Callable[[], T]) -> T:
    """``function()``, called from a frame with room for deep calls after it."""
    result: T = _roomy_call(function)
    return result
