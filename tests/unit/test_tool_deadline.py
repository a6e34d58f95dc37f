"""A blocking tool's deadline (issue 33): a result that is there when the deadline is noticed wins.

On a saturated host (100 sessions on two cores) a disk write held the gate's event loop for seconds; when it ran
again the tool's result and its deadline fell due in one loop turn, and the deadline's cancellation threw away a
result that had come in time: the cell saw ToolTimeout. The loop's stall is made here with a blocking sleep, the
condition under test, not a wait for something.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from cellgate.gate.calls.tool_threads import Running, ToolThreads

CALL = Running(seq=1, id="c1", tool="list_orders", started="2026-12-05T00:00:00.000Z")


def run(job: object, deadline: float, stall: threading.Event | None = None) -> object:
    async def main() -> object:
        threads = ToolThreads(4)
        await threads.reserve()
        if stall is not None:
            loop = asyncio.get_running_loop()
            due = loop.time() + deadline

            def held_up() -> None:  # the loop held up (as a stalled write held it) until both are in: the tool's
                stall.set()  # thread has ended (its result handed to the loop) and the deadline has passed
                for thread in threading.enumerate():
                    if thread.name == f"cellgate-tool-{CALL.tool}":
                        thread.join(10)
                        assert not thread.is_alive()
                time.sleep(max(0.0, due - loop.time()))  # the stall itself, no longer than the deadline

            loop.call_soon(held_up)
        return await threads.run(job, CALL, deadline)  # type: ignore[arg-type]

    return asyncio.run(main())


def test_a_result_in_before_a_stalled_loop_notices_the_deadline_is_kept() -> None:
    stalled = threading.Event()

    def tool() -> str:
        assert stalled.wait(10)
        return "orders"

    assert run(tool, deadline=0.05, stall=stalled) == "orders"


def test_a_tool_still_running_at_its_deadline_times_out_and_its_thread_runs_on() -> None:
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        release.wait(10)
        finished.set()
        return "late"

    with pytest.raises(TimeoutError):
        run(slow, deadline=0.2)
    release.set()
    assert finished.wait(10)  # left running, never killed; its result is discarded
