"""Installed entry points by group, read once for each ``sys.path``.

``importlib.metadata.entry_points`` reads the metadata of every installed distribution on each call (~30 ms in
the project's environment), and a session's start asked for seven groups (backends, tool sources, telemetry,
approvers, config sections, record events): a hundred concurrent starts spent seconds of the gate's one
interpreter on it. A distribution put on ``sys.path`` later (as a test installs one) is a new ``sys.path``, read
anew; one installed into a folder already on it is seen by the next process.
"""

from __future__ import annotations

import functools
import sys
from importlib.metadata import EntryPoint
from importlib.metadata import entry_points as _read

__all__ = ["entry_points"]


def entry_points(group: str) -> tuple[EntryPoint, ...]:
    """The installed entry points of ``group``, as ``importlib.metadata.entry_points(group=group)`` gives them."""
    return _of(group, tuple(sys.path))


@functools.lru_cache(maxsize=64)
def _of(group: str, path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    return tuple(_read(group=group))
