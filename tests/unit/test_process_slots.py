"""Tool threads bounded for the whole process (issue 33): each session's relay runs its own event loop, so the
bound must hold across loops. A hundred sessions of one process once ran a hundred tool threads at once, sharing
the interpreter's lock a hundred ways, and on a saturated host calls ran past their deadline.

The slots are real (``ProcessSlots``), the loops are real loops on real threads; what a waiter is doing is read
from the slots themselves (queued or not), never from a sleep.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

from cellgate.gate.calls import tool_threads
from cellgate.gate.calls.process_slots import ProcessSlots
from cellgate.gate.calls.tool_threads import Running, ToolThreads


class LoopThread:
    """An event loop running on a thread of its own, as a session's relay runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def loops() -> Iterator[tuple[LoopThread, LoopThread]]:
    pair = LoopThread(), LoopThread()
    yield pair
    for each in pair:
        each.close()


def queued(slots: ProcessSlots, count: int) -> None:
    """Wait (bounded) until ``count`` waiters are queued on ``slots``."""
    done = threading.Event()
    for _ in range(10_000):
        with slots._lock:
            if len(slots._waiters) == count:
                done.set()
                break
        threading.Event().wait(0.001)
    assert done.is_set(), f"{len(slots._waiters)} waiters queued, not {count}"


def held_on_one_loop_waited_on_another(loops: tuple[LoopThread, LoopThread]) -> tuple[ProcessSlots, Any]:
    """One slot, taken on the first loop; the second loop's wait for it, queued."""
    first, second = loops
    slots = ProcessSlots(1)
    first.submit(slots.acquire()).result(10)
    waiting = second.submit(slots.acquire())
    queued(slots, 1)
    assert not waiting.done() and slots.free == 0
    return slots, waiting


def test_a_slot_taken_on_one_loop_is_waited_for_on_another(loops: tuple[LoopThread, LoopThread]) -> None:
    slots, waiting = held_on_one_loop_waited_on_another(loops)
    first = loops[0]
    first.loop.call_soon_threadsafe(slots.release)
    waiting.result(10)  # handed over to the other loop's waiter
    assert slots.free == 0
    slots.release()
    assert slots.free == 1


def test_a_cancelled_wait_takes_no_slot(loops: tuple[LoopThread, LoopThread]) -> None:
    slots, waiting = held_on_one_loop_waited_on_another(loops)
    waiting.cancel()
    queued(slots, 0)
    slots.release()
    assert slots.free == 1


@pytest.mark.parametrize("order", ["cancelled before the slot arrives", "cancelled after the slot arrived"])
def test_a_slot_handed_to_a_wait_cancelled_meanwhile_is_passed_on(order: str) -> None:
    async def main() -> int:
        slots = ProcessSlots(1)
        await slots.acquire()
        waiter = asyncio.ensure_future(slots.acquire())
        await asyncio.sleep(0)  # one loop turn: the waiter queues itself
        assert len(slots._waiters) == 1
        slots.release()  # the hand-over is scheduled on this loop
        if order == "cancelled before the slot arrives":
            waiter.cancel()
        else:
            asyncio.get_running_loop().call_soon(waiter.cancel)  # after the hand-over, before the waiter resumes
        with pytest.raises(asyncio.CancelledError):
            await waiter
        return slots.free

    assert asyncio.run(main()) == 1


def test_tool_threads_of_two_sessions_share_the_process_bound(loops: tuple[LoopThread, LoopThread]) -> None:
    slots = ProcessSlots(1)  # the process's (``tool_threads.PROCESS_SLOTS``), made small
    first, second = loops
    started, release, stuck = threading.Event(), threading.Event(), threading.Event()
    call = Running(seq=1, id="c1", tool="list_orders", started="2026-12-05T00:00:00.000Z")

    async def session_call(job: Any, deadline: float | None) -> Any:
        threads = ToolThreads(4, slots)  # each session has slots of its own to spare: the process's is the bound
        await threads.reserve()
        return await threads.run(job, call, deadline)

    running = first.submit(session_call(lambda: started.set() or (release.wait(10) and "first"), None))
    assert started.wait(10)  # the first session's tool runs, in the process's one slot
    second_call = second.submit(session_call(lambda: "second", None))
    queued(slots, 1)  # the second session's call waits for the first's thread
    assert not second_call.done()
    release.set()
    assert running.result(10) == "first" and second_call.result(10) == "second"
    assert slots.free == 1

    # A tool stuck past its deadline keeps its thread, but gives the process's slot back.
    stuck_call = first.submit(session_call(lambda: stuck.wait(10), 0.2))
    with pytest.raises(TimeoutError):
        stuck_call.result(10)
    assert second.submit(session_call(lambda: "not held up", None)).result(10) == "not held up"
    stuck.set()


def test_every_session_of_the_process_shares_one_set_of_slots() -> None:
    assert ToolThreads(4)._process_slots is ToolThreads(2)._process_slots is tool_threads.PROCESS_SLOTS
    assert tool_threads.PROCESS_SLOTS.size == tool_threads.PROCESS_RUNNING
