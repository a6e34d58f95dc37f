"""The queue of cells the frontends sent, and how each one ends.

Each ``execute_request`` the frontend sent (the host's copy of the program,
never the kernel's account of it) becomes a ``CellRun``, FIFO; the head is the
running cell, the one every tool call and output is attributed to. A cell ends
when the kernel has both replied and gone idle, when it is aborted, or when
the kernel is gone (``fail_all``); its end withdraws its approval requests,
records what was held back of its output, and resolves the caller's future.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from cellgate.gate.audit.cells import CellStatus
from cellgate.gate.audit.recorder import CellRecord, Recorder
from cellgate.gate.calls.asking import NoClock, NoNotices, WaitingNotices
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.session import frontend_replies
from cellgate.gate.session.bounds import HostBounds, RefusalLedger
from cellgate.gate.session.cell_clock import CellClock
from cellgate.gate.session.events import RelayEvents, Tasks
from cellgate.gate.session.output_cap import OutputCap
from cellgate.gate.session.output_ledger import OutputLedger

RESULTS_KEPT = 4096  # futures of frontends' cells nobody waits for


@dataclass(frozen=True)
class CellTimeouts:
    cell: float = 600.0
    interrupt_grace: float = 5.0


@dataclass(frozen=True)
class FrontendRequest:
    """Who sent the cell: answered by the host if the kernel cannot."""

    header: dict[str, Any]
    idents: list[bytes]
    allow_stdin: bool = False


@dataclass
class CellEnd:
    """What is known of how the cell ends: the kernel's reply and idle status, limits hit, its error."""

    replied: bool = False
    idle: bool = False
    reply_status: str | None = None
    error: dict[str, str] | None = None
    limits: list[str] = field(default_factory=list)

    def hit(self, limit: str) -> None:
        if limit not in self.limits:
            self.limits.append(limit)


@dataclass
class CellRun:
    record: CellRecord
    request: FrontendRequest
    output: OutputCap
    refusals: RefusalLedger
    end: CellEnd = field(default_factory=CellEnd)
    clock: CellClock | None = None  # set when the cell starts
    # Unique per cell run (a client's msg_ids start over after a restart): what approvals are withdrawn by.
    key: str = field(default_factory=lambda: os.urandom(8).hex())

    def scope(self, notices: WaitingNotices | None = None) -> CallScope:
        """What the dispatcher attributes a call of this cell to; ``notices`` shows its waits for a person."""
        return CallScope(cell=self.record, msg_id=self.record.msg_id, key=self.key, source=self.record.source,
                         clock=self.clock if self.clock is not None else NoClock(), refusals=self.refusals,
                         notices=notices or NoNotices())


class KernelControl(Protocol):
    """What the queue asks of the kernel's keeper (``kernel_watch.KernelWatch``)."""

    def interrupt_soon(self) -> None: ...

    def kill_soon(self) -> bool: ...

    def cpu_source(self) -> CpuSource: ...


Answer = Callable[[dict[str, Any], list[bytes], dict[str, Any]], Coroutine[Any, Any, None]]


class Results:
    """Futures resolved with the record of the cell a ``msg_id`` started (read from other threads)."""

    def __init__(self) -> None:
        self._futures: dict[str, concurrent.futures.Future[CellRecord]] = {}
        self._lock = threading.Lock()

    def future(self, msg_id: str) -> concurrent.futures.Future[CellRecord]:
        with self._lock:
            future = self._futures.get(msg_id)
            if future is None:
                future = self._futures[msg_id] = concurrent.futures.Future()
                while len(self._futures) > RESULTS_KEPT:
                    self._futures.pop(next(iter(self._futures)))
            return future

    def forget(self, msg_id: str, only_done: bool = False) -> None:
        with self._lock:  # a client may reuse a msg_id after a restart
            stale = self._futures.get(msg_id)
            if stale is not None and (stale.done() or not only_done):
                del self._futures[msg_id]


class CellQueue:
    def __init__(self, recorder: Recorder, dispatcher: Dispatcher, events: RelayEvents, tasks: Tasks,
                 timeouts: CellTimeouts, bounds: HostBounds, output_limit: int, answer: Answer) -> None:
        self.recorder = recorder
        self.dispatcher = dispatcher
        self.events = events
        self.tasks = tasks
        self.timeouts = timeouts
        self.bounds = bounds
        self.output_limit = output_limit
        self._answer = answer
        self.results = Results()
        self.kernel: KernelControl | None = None  # set when a kernel is attached
        self.ledger: OutputLedger | None = None
        self._queue: collections.deque[CellRun] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._queue)

    def running(self) -> CellRun | None:
        return self._queue[0] if self._queue else None

    def add(self, record: CellRecord, request: FrontendRequest) -> None:
        self._queue.append(CellRun(record=record, request=request, output=OutputCap(self.output_limit),
                                   refusals=RefusalLedger(budget=self.bounds.max_refusals_per_cell)))
        if len(self._queue) == 1:
            self.start_head()

    def start_head(self) -> None:
        head = self.running()
        if head is None or head.clock is not None or self.kernel is None:
            return
        self.recorder.cell_started(head.record)
        self.dispatcher.new_cell()
        kernel = self.kernel
        head.clock = CellClock(asyncio.get_running_loop(), self.timeouts.cell, kernel.cpu_source,
                               lambda: self._on_timeout(head))
        head.clock.start()

    # ------------------------------------------------------ what the kernel says
    def replied(self, head: CellRun, status: str, error: dict[str, str] | None) -> None:
        head.end.replied = True
        head.end.reply_status = status
        if error is not None:
            head.end.error = error
        if head.end.idle or status == "aborted":
            self.finish_head()

    def idle(self, head: CellRun) -> None:
        head.end.idle = True
        if head.end.replied:
            self.finish_head()

    def capture(self, head: CellRun, output: dict[str, Any]) -> None:
        """Record a cell's output up to the limit (``OutputCap``)."""
        if self.ledger is not None:
            self.ledger.received(head.record.msg_id, output)
        head.output.take(output, lambda out: self.recorder.output(head.record, out))

    # ------------------------------------------------------ limits
    def _on_timeout(self, head: CellRun) -> None:
        if self.running() is not head or head.clock is None:
            return
        head.end.limits.append("timeout")
        self.recorder.event("cell-timeout", msg_id=head.record.msg_id, seconds=self.timeouts.cell)
        if self.kernel is not None:
            self.kernel.interrupt_soon()
        head.clock.then(self.timeouts.interrupt_grace, lambda: self._on_grace_expired(head))

    def _on_grace_expired(self, head: CellRun) -> None:
        if self.running() is not head or self.kernel is None:
            return
        if self.kernel.kill_soon():
            self.recorder.event("cell-kill", msg_id=head.record.msg_id,
                                reason=f"did not stop within {self.timeouts.interrupt_grace:g} s of the interrupt")

    def refused(self, head: CellRun, verdict: str | None) -> None:
        """Past its refusal budget a cell is stopped (its kernel killed), once."""
        if verdict != "dropped" or "refusals" in head.end.limits or self.running() is not head:
            return
        head.end.limits.append("refusals")
        self.recorder.event("cell-kill", msg_id=head.record.msg_id,
                            reason=f"more than {head.refusals.budget} refused calls in one cell "
                                   "([sandbox] max_refusals_per_cell)")
        if self.kernel is not None:
            self.kernel.kill_soon()

    # ------------------------------------------------------ ends
    def fail_all(self, status: CellStatus, reason: str) -> None:
        """End every queued cell because the kernel is gone; tell frontends."""
        while self._queue:
            head = self._queue[0]
            head.end.hit(reason)
            self.tasks.spawn(self._answer(head.request.header, head.request.idents,
                                          frontend_replies.killed(reason, head.record.execution_count)))
            self.finish_head(forced_status=status)

    def finish_head(self, forced_status: CellStatus | None = None) -> None:
        head = self._queue.popleft()
        if head.clock is not None:
            head.clock.stop()
        record = head.record
        status = forced_status or self._status(head)
        if status == "aborted":
            self.recorder.cell_aborted(record)  # never ran: journal only
            self.results.future(record.msg_id).set_result(record)
            if self._queue:
                self.start_head()
            return
        try:
            for ask in self.dispatcher.withdraw(head.key, status):  # nothing a cell asked for outlives it
                self.recorder.event("approval-withdrawn", msg_id=record.msg_id, request=ask.id, seq=ask.seq,
                                    tool=ask.tool, reason=f"its cell ended ({status})")
            self._note_lost_output(head)
            if head.output.flush(lambda out: self.recorder.output(record, out)):
                head.end.hit("output")
            for event, data in head.refusals.summary():
                self.recorder.event(event, msg_id=record.msg_id, **data)
            self.recorder.cell_ended(record, status, head.end.limits, head.end.error)
        except Exception as exc:  # the record of a cell must never leave its caller waiting
            self.events.failure(exc)
            record.status = record.status or status
        self.results.future(record.msg_id).set_result(record)
        if self._queue:
            self.start_head()

    @staticmethod
    def _status(head: CellRun) -> CellStatus | Literal["aborted"]:
        end = head.end
        if end.reply_status == "aborted":
            return "aborted"
        if head.clock is not None and head.clock.expired:
            return "timeout"
        if end.reply_status == "ok":
            return "ok"
        if end.error and end.error.get("ename") == "KeyboardInterrupt":
            return "interrupted"
        return "error"

    def _note_lost_output(self, head: CellRun) -> None:
        lost = self.ledger.lost() if self.ledger is not None else 0
        if lost:
            self.capture(head, {"output_type": "stream", "name": "stderr", "text":
                                f"[cellgate: {lost} output messages lost between the kernel and the host]\n"})
            head.end.limits.append("output-incomplete")
