"""The queues of cells the frontends sent, one per shell, and how each cell ends.

Each ``execute_request`` the frontend sent (the host's copy of the program,
never the kernel's account of it) becomes a ``CellRun`` in the FIFO of the
shell it was sent to: the kernel's main shell, or one of its subshells the
host saw created (``subshells``). A shell's running cell is the first of its
FIFO the kernel has not gone idle after; every tool call and output is
attributed to the running cell whose ``msg_id`` the kernel's message names, a
claim accepted only for a cell the host knows is running (without subshells
there is one running cell at a time, as there always was). Replies and IOPub
come on different sockets, so either may run ahead of the other when a
frontend queues many cells ("Run all"): an execute_reply is taken for the
first cell of its shell not yet answered, in the order the host relayed them,
and a cell that went idle waits for its reply while the next one runs. A
cell ends when the kernel has both replied and gone idle, when it is aborted,
or when the kernel is gone (``fail_all``); its
end withdraws its approval requests, records what was held back of its
output, and resolves the caller's future. Budgets, approvals, the clock and
the timeout are each cell's own.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import os
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from cellgate.gate.audit.artifacts import blob_value
from cellgate.gate.audit.cells import CellStatus
from cellgate.gate.audit.recorder import CellRecord, Recorder
from cellgate.gate.calls import retry
from cellgate.gate.calls.asking import NoClock, NoNotices, WaitingNotices
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.calls.policy import CellCounts
from cellgate.gate.calls.retry import CellWrites
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.session.cells import frontend_replies
from cellgate.gate.session.cells.cell_clock import CellClock
from cellgate.gate.session.cells.late import LateOutput
from cellgate.gate.session.cells.output_cap import OutputCap
from cellgate.gate.session.cells.refusals import RefusalLedger
from cellgate.gate.session.cells.subshells import Subshells
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.kernel.watch import KernelEnd

RESULTS_KEPT = 4096  # futures of frontends' cells nobody waits for
Shell = str | None  # None: the kernel's main shell; else the id of one of its subshells


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
    # ipykernel ignores SIGINT until its execute handler runs (it says so with execute_input): an interrupt asked
    # for before then is sent again once the kernel has started the cell, or it would be lost.
    started_in_kernel: bool = False
    interrupt_when_started: bool = False
    shell: Shell = None
    counts: CellCounts = field(default_factory=CellCounts)  # its calls, for the per-cell budgets
    # Unique per cell run (a client's msg_ids start over after a restart): what approvals are withdrawn by.
    key: str = field(default_factory=lambda: os.urandom(8).hex())
    writes: CellWrites | None = None  # its keys, and a retry's record of earlier attempts: set when it starts

    def scope(self, notices: WaitingNotices | None = None) -> CallScope:
        """What the dispatcher attributes a call of this cell to; ``notices`` shows its waits for a person."""
        return CallScope(cell=self.record, msg_id=self.record.msg_id, key=self.key, source=self.record.source,
                         clock=self.clock if self.clock is not None else NoClock(), refusals=self.refusals,
                         notices=notices or NoNotices(), counts=self.counts, writes=self.writes)


def cell_writes(recorder: Recorder, record: CellRecord) -> CellWrites:
    """A starting cell's keys; for a retry, what the earlier attempts of its chain did, from the record."""
    chain = retry.chain_of(record)
    if "retry_of" not in record.extra:
        return CellWrites(chain=chain)
    earlier = retry.attempts((cell for cell in recorder.cells if cell is not record), chain)

    def load(call: dict[str, Any]) -> Any:  # a result the record keeps as a blob: read back, its digest checked
        if "result" in call:
            return call["result"]
        return blob_value(recorder.notebook_path.parent, recorder.journal.path.name, call, "a retried call")

    return CellWrites(chain=chain, record=retry.remembered(earlier), retry=True, load=load)


class KernelControl(Protocol):
    """What the queue asks of the kernel's keeper (``kernel.watch.KernelWatch``)."""

    def interrupt_soon(self) -> None: ...

    def kill_soon(self) -> bool: ...

    def cpu_source(self) -> CpuSource: ...

    def output_received(self, msg_id: str, output: dict[str, Any]) -> None: ...

    def outputs_lost(self) -> int: ...


Answer = Callable[[dict[str, Any], list[bytes], dict[str, Any]], Coroutine[Any, Any, None]]


class Results:
    """Futures resolved with the record of the cell a ``msg_id`` started (read from other threads)."""

    def __init__(self) -> None:
        self._futures: dict[str, concurrent.futures.Future[CellRecord]] = {}
        self._lock = threading.Lock()
        self._failed: Exception | None = None

    def future(self, msg_id: str) -> concurrent.futures.Future[CellRecord]:
        with self._lock:
            future = self._futures.get(msg_id)
            if future is None:
                future = self._futures[msg_id] = concurrent.futures.Future()
                if self._failed is not None:
                    future.set_exception(self._failed)
                while len(self._futures) > RESULTS_KEPT:
                    self._futures.pop(next(iter(self._futures)))
            return future

    def fail(self, error: Exception) -> None:
        """The session ended (its gate failed): every cell waited for, and every one asked for later, raises."""
        with self._lock:
            self._failed = error
            for future in self._futures.values():
                if not future.done():
                    future.set_exception(error)

    def forget(self, msg_id: str, only_done: bool = False) -> None:
        with self._lock:  # a client may reuse a msg_id after a restart
            stale = self._futures.get(msg_id)
            if stale is not None and (stale.done() or not only_done):
                del self._futures[msg_id]


class CellQueue:
    def __init__(self, ctx: SessionContext, dispatcher: Dispatcher, kernel: KernelControl, timeouts: CellTimeouts,
                 output_limit: int, answer: Answer) -> None:
        self.recorder: Recorder = ctx.recorder
        self.dispatcher = dispatcher
        self.events = ctx.events
        self.tasks = ctx.tasks
        self.timeouts = timeouts
        self.bounds = ctx.bounds
        self.output_limit = output_limit
        self._answer = answer
        self.kernel = kernel
        self.results = Results()
        # Output of cells that already ended, kept with the ended cell whose work printed it.
        self.late = LateOutput(ctx.recorder, ctx.events.failure)
        self.subshells = Subshells()
        self._shells: dict[Shell, collections.deque[CellRun]] = {None: collections.deque()}
        # The kernel's execution counter as last seen: what a reply the host authors carries (frontends count on one).
        self.kernel_count = 0

    def saw_count(self, count: int) -> None:
        """The kernel said its counter (an execute_input or reply; 0 for a new kernel)."""
        self.kernel_count = count

    def __bool__(self) -> bool:
        return any(self._shells.values())

    def heads(self) -> list[CellRun]:
        """The running cell of each shell, in the order they were sent."""
        heads = (self._active(queue) for queue in self._shells.values())
        return sorted((run for run in heads if run is not None), key=lambda run: run.record.serial)

    @staticmethod
    def _active(queue: collections.deque[CellRun]) -> CellRun | None:
        """A shell's running cell: the first the kernel has not gone idle after (those before it await replies)."""
        return next((run for run in queue if not run.end.idle), None)

    def running(self) -> CellRun | None:
        """The running cell sent first (without subshells, the one running cell)."""
        heads = self.heads()
        return heads[0] if heads else None

    def running_cell(self, msg_id: Any) -> CellRun | None:
        """The running cell whose ``msg_id`` a kernel's message names, if the host knows it is running (or it went
        idle and awaits its reply: its output until then is still its own, as it was before IOPub ran ahead)."""
        for queue in self._shells.values():
            for run in queue:
                if run.clock is None:
                    break  # started cells come first: the rest wait
                if run.record.msg_id == msg_id:
                    return run
        return None

    def replying_cell(self, msg_id: Any) -> CellRun | None:
        """The cell an execute_reply naming ``msg_id`` answers: the first of its shell not yet answered (a shell
        answers in the order the host relayed its cells), even while IOPub still tells of an earlier one."""
        for queue in self._shells.values():
            run = next((run for run in queue if not run.end.replied), None)
            if run is not None and run.record.msg_id == msg_id:
                return run
        return None

    def attribute(self, claim: Any) -> CellRun | None:
        """The running cell a tool call is attributed to: the one its (hostile) claim names if that one runs, else
        the first running (the dispatcher then refuses a call whose claim names another cell, as it always did)."""
        return self.running_cell(claim) or self.running()

    def _queued(self, run: CellRun) -> bool:
        return any(queued is run for queued in self._shells.get(run.shell, ()))

    def _is_running(self, run: CellRun) -> bool:
        queue = self._shells.get(run.shell)
        return queue is not None and self._active(queue) is run

    def add(self, record: CellRecord, request: FrontendRequest, shell: Shell = None) -> None:
        run = CellRun(record=record, request=request, output=OutputCap(self.output_limit),
                      refusals=RefusalLedger(budget=self.bounds.max_refusals_per_cell), shell=shell)
        queue = self._shells.setdefault(shell, collections.deque())
        queue.append(run)
        if self._active(queue) is run:
            self._start(run)

    def start_head(self) -> None:
        """Start each shell's head that waited for a kernel."""
        for head in self.heads():
            self._start(head)

    def _start(self, head: CellRun) -> None:
        if head.clock is not None:
            return
        kernel = self.kernel
        head.clock = CellClock(asyncio.get_running_loop(), self.timeouts.cell, kernel.cpu_source,
                               lambda: self._on_timeout(head))
        head.clock.start()  # before anything is journalled: the cell runs under its clock whatever the journal does
        head.writes = cell_writes(self.recorder, head.record)
        self.events.write(lambda: self.recorder.cell_started(head.record))
        self.dispatcher.new_cell()

    # ------------------------------------------------------ what the kernel says
    def replied(self, head: CellRun, status: str, error: dict[str, str] | None) -> None:
        head.end.replied = True
        head.end.reply_status = status
        if error is not None:
            head.end.error = error
        if head.end.idle or status == "aborted":
            self.finish(head)

    def idle(self, head: CellRun) -> None:
        head.end.idle = True
        if head.end.replied:
            self.finish(head)
        else:  # its reply is on its way on the shell socket; the kernel runs the next cell meanwhile
            self._next(head.shell)

    def capture(self, head: CellRun, output: dict[str, Any]) -> None:
        """Record a cell's output up to the limit (``OutputCap``)."""
        self.kernel.output_received(head.record.msg_id, output)
        def write(out: dict[str, Any]) -> None:
            self.events.write(lambda: self.recorder.output(head.record, out))
        head.output.take(output, write)

    # ------------------------------------------------------ limits
    def _on_timeout(self, head: CellRun) -> None:
        if head.end.idle and self._queued(head):  # done but never answered: nothing to interrupt
            head.end.hit("timeout")
            self.events.life("cell-timeout", msg_id=head.record.msg_id, seconds=self.timeouts.cell,
                             note="the kernel went idle after the cell and never sent its execute_reply")
            self.finish(head)
            return
        if not self._is_running(head) or head.clock is None:
            return
        head.end.limits.append("timeout")
        # The limit is enforced first, journalled after: a journal that cannot be written never keeps a cell running.
        head.clock.then(self.timeouts.interrupt_grace, lambda: self._on_grace_expired(head))
        if head.shell is None:
            self.kernel.interrupt_soon()
            self.events.life("cell-timeout", msg_id=head.record.msg_id, seconds=self.timeouts.cell)
        else:  # an interrupt (SIGINT) stops the main shell's cell, never a subshell's: only a restart stops it
            self.events.life("cell-timeout", msg_id=head.record.msg_id, seconds=self.timeouts.cell,
                             subshell=head.shell, note="a subshell's cell cannot be interrupted; the kernel is "
                                                       "stopped unless the cell ends within the grace")

    def _on_grace_expired(self, head: CellRun) -> None:
        if not self._is_running(head):
            return
        if self.kernel.kill_soon():
            what = "the interrupt" if head.shell is None else f"its timeout (subshell {head.shell})"
            self.events.life("cell-kill", msg_id=head.record.msg_id,
                             reason=f"did not stop within {self.timeouts.interrupt_grace:g} s of {what}")

    def refused(self, head: CellRun, verdict: str | None) -> None:
        """Past its refusal budget a cell is stopped (its kernel killed), once."""
        if verdict != "dropped" or "refusals" in head.end.limits or not self._is_running(head):
            return
        head.end.limits.append("refusals")
        self.kernel.kill_soon()
        self.events.life("cell-kill", msg_id=head.record.msg_id,
                         reason=f"more than {head.refusals.budget} refused calls in one cell "
                                "([sandbox] max_refusals_per_cell)")

    # ------------------------------------------------------ what the kernel's keeper says (``KernelListener``)
    def any_running(self) -> bool:
        return bool(self.heads())

    def recover_output(self, lost: Callable[[str], Iterable[dict[str, Any]]]) -> None:
        for head in self.heads():
            for output in lost(head.record.msg_id):
                self.capture(head, output)

    def mark(self, end: KernelEnd) -> None:
        for head in self.heads():
            if end.error is not None:
                head.end.error = end.error
            head.end.hit(end.reason)

    def kernel_ended(self, end: KernelEnd) -> None:
        if end.error is not None:
            for head in self.heads():
                head.end.error = end.error
        self.fail_all(end.status, end.reason)

    # ------------------------------------------------------ ends
    def fail_all(self, status: CellStatus, reason: str) -> None:
        """End every queued cell of every shell because the kernel is gone (its subshells too); tell frontends."""
        for queue in list(self._shells.values()):
            while queue:
                head = queue[0]
                head.end.hit(reason)
                self.answer_soon(head.request, frontend_replies.killed(reason, self._count_of(head)))
                self.finish(head, forced_status=status)
        self._shells = {None: collections.deque()}
        self.subshells.forget_all()

    def answer_soon(self, request: FrontendRequest, error: dict[str, Any]) -> None:
        """Answer the frontend that sent a cell the kernel will not answer (``frontend_replies``)."""
        self.tasks.spawn(self._answer(request.header, request.idents, error))

    def _count_of(self, head: CellRun) -> int:
        count = head.record.execution_count
        return count if count is not None else self.kernel_count

    def subshell_deleted(self, subshell_id: str) -> None:
        """The kernel deleted a subshell (after its running cell ended): the cells queued behind it never run."""
        queue = self._shells.get(subshell_id)
        while queue is not None and len(queue) > 1:
            run = queue[1]
            del queue[1]
            self.events.write(functools.partial(self.recorder.cell_aborted, run.record))
            self.results.future(run.record.msg_id).set_result(run.record)
            self.answer_soon(run.request, frontend_replies.subshell_deleted(subshell_id))
        if queue is not None and not queue:
            del self._shells[subshell_id]

    def finish(self, head: CellRun, forced_status: CellStatus | None = None) -> None:
        queue = self._shells[head.shell]
        # Not always the first: an aborted cell's reply may come before an earlier cell's idle.
        del queue[next(n for n, run in enumerate(queue) if run is head)]
        if head.clock is not None:
            head.clock.stop()
        record = head.record
        status = forced_status or self._status(head)
        if status == "aborted":
            self.events.write(lambda: self.recorder.cell_aborted(record))  # never ran: journal only
            self.results.future(record.msg_id).set_result(record)
            self._next(head.shell)
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
            # The caller still learns how the cell ended, from the host's own account of it.
            record.status = record.status or status
            record.limits_hit = record.limits_hit or list(head.end.limits)
            record.error = record.error or head.end.error
        self.results.future(record.msg_id).set_result(record)
        self._next(head.shell)

    def _next(self, shell: Shell) -> None:
        queue = self._shells.get(shell)
        active = self._active(queue) if queue else None
        if active is not None:
            self._start(active)
        elif queue is not None and not queue and shell is not None and not self.subshells.knows(shell):
            del self._shells[shell]  # a deleted subshell's last cell ended

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
        lost = self.kernel.outputs_lost()
        if lost:
            self.capture(head, {"output_type": "stream", "name": "stderr", "text":
                                f"[cellgate: {lost} output messages lost between the kernel and the host]\n"})
            head.end.limits.append("output-incomplete")
