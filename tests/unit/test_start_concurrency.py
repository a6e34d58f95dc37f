"""Concurrent starts run at once (issue 33): a hundred sessions of one process started together waited in line
for asyncio's default executor (cores + 4 threads), since a start mostly waits (runsc restoring, the thread
polling for the kernel's sockets); on a saturated host the line, not the machine, set the start rate.

What is under test is the provisioner's ``_start_sandbox``; the backend stands in for a start that waits, with a
barrier that only opens once ``STARTS_AT_ONCE`` starts are in at the same time.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from cellgate.gate.session import provisioner
from cellgate.gate.session.provisioner import STARTS_AT_ONCE, GVisorProvisioner


class WaitingStarts:
    """A backend whose starts each wait until ``count`` of them are running at once."""

    def __init__(self, count: int) -> None:
        self.barrier = threading.Barrier(count, timeout=30)

    def start(self, request: Any) -> str:
        return f"started {request} with {self.barrier.wait()} others waiting"


def test_more_starts_run_at_once_than_the_default_executor_has_threads() -> None:
    assert STARTS_AT_ONCE > min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor's size
    backend = WaitingStarts(STARTS_AT_ONCE)
    owner = GVisorProvisioner(kernel_id="k", kernel_spec=None)

    async def main() -> list[Any]:
        return await asyncio.gather(*(owner._start_sandbox(backend, n) for n in range(STARTS_AT_ONCE)))  # type: ignore[arg-type]

    started = asyncio.run(main())
    assert len(started) == STARTS_AT_ONCE and not backend.barrier.broken


def test_starts_share_one_bounded_executor_for_the_process() -> None:
    assert provisioner._starts._max_workers == STARTS_AT_ONCE
