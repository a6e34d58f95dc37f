"""Is the owner alive? One owner record, read the same way by everything that outlives a crash.

A record names a process: ``{"host": ..., "pid": ..., "start_time": ...}`` (the start time, in clock ticks since
boot from ``/proc/PID/stat``, tells a reused pid apart). It is written with ``this_process()`` into what a host
process leaves behind: a local sandbox's run folder (``local.leftovers``), a kernel pod's objects (the kubernetes
extension's annotation), an approval request (``calls.approval_queue``). The writer may add keys of its own; only
these three are read here.

``owner_state`` answers ``alive``, ``gone`` (the process ended, or the pid now names another process), or
``unknown``: another host's process, or not a record (who cannot be told is never declared gone).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, Literal

OwnerState = Literal["alive", "gone", "unknown"]


def start_time(pid: int) -> str | None:
    """The start time of a live process (None if there is none, or it is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def process_record(pid: int) -> dict[str, Any]:
    """The owner record of process ``pid`` of this host."""
    return {"host": socket.gethostname(), "pid": pid, "start_time": start_time(pid)}


def this_process() -> dict[str, Any]:
    """The owner record of the calling process."""
    return process_record(os.getpid())


def owner_state(record: Mapping[str, Any]) -> OwnerState:
    """Whether the process a record names is alive (see the module docstring).

    A record without ``host`` was written on this host (a local run folder's, before records named their host).
    """
    pid, started, host = record.get("pid"), record.get("start_time"), record.get("host", socket.gethostname())
    if not (isinstance(pid, int) and not isinstance(pid, bool) and isinstance(started, str)) or \
            host != socket.gethostname():
        return "unknown"
    return "alive" if start_time(pid) == started else "gone"


def owner_alive(record: Mapping[str, Any]) -> bool:
    """The record names a live process of this host (``owner_state`` is ``alive``)."""
    return owner_state(record) == "alive"


__all__ = ["OwnerState", "owner_alive", "owner_state", "process_record", "start_time", "this_process"]
