"""Asking a person: the approval requests a session's calls wait on, and their withdrawal.

A call whose policy decision is ``approve`` waits here for the approver, at
most ``[policy] approval_timeout``; meanwhile its cell's clock is paused (time
spent waiting for a person does not count against the cell's timeout). When a
cell ends, every request its calls wait on is withdrawn (none of them will
run), and a call of that cell that reaches approval later is withdrawn at once.

While a call waits, its cell is told (``WaitingNotices``): once when the wait
starts (the tool, the request id, the approver and the deadline) and once
with how it ended, so a frontend can show that the cell waits for a person
rather than hangs.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from cellgate.gate._json import iso, utcnow
from cellgate.gate.calls.approval import ApprovalAnswer, ApprovalRequest, Approver
from cellgate.gate.calls.protocol import CallFailed
from cellgate.gate.calls.record import CallRecord

ENDED_CELLS_KEPT = 256  # cells whose end a late call's approval is checked against


class CellClock(Protocol):
    """The wall clock of the cell a call belongs to: paused while one of its calls waits for a person."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class NoClock:
    """For a call no cell clock runs for (a direct call)."""

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass


WaitOutcome = Literal["approved", "denied", "timed out", "withdrawn"]


@dataclass(frozen=True)
class Waiting:
    """A call waiting for a person, as its cell is told; ``outcome`` is None while it waits."""

    cell: str  # the CallScope key of the call's cell
    request: str  # the approval request's id (what `cellgate approvals approve` takes)
    seq: int
    tool: str  # a registered tool's name (the operator's), still shown escaped: the call came from the sandbox
    approver: str
    deadline: float  # host clock, epoch seconds
    outcome: WaitOutcome | None = None


class WaitingNotices(Protocol):
    """Where a cell is told that one of its calls waits for a person, and how the wait ended."""

    def show(self, notice: Waiting) -> None: ...


class NoNotices:
    """For a call nobody is shown waiting (a direct call: the agent loop waits on it)."""

    def show(self, notice: Waiting) -> None:
        pass


class ApprovalDesk:
    """Serves a session's approval requests through its approver."""

    def __init__(self, approver: Approver, session_id: str, timeout: float) -> None:
        self.approver = approver
        self.session_id = session_id
        self.timeout = timeout
        # Requests being waited for (request id -> cell, request, waiter), and the ones withdrawn.
        self._asking: dict[str, tuple[str, ApprovalRequest, asyncio.Future[Any]]] = {}
        self._withdrawn: dict[str, str] = {}
        self._ended_cells: collections.OrderedDict[str, str] = collections.OrderedDict()

    def withdraw(self, cell: str, reason: str) -> list[ApprovalRequest]:
        """The cell ended: withdraw every approval request its calls wait for (none of them will run).

        Synchronous, so the caller can journal the withdrawals before the cell's end.
        """
        self._ended_cells[cell] = reason
        while len(self._ended_cells) > ENDED_CELLS_KEPT:
            self._ended_cells.popitem(last=False)
        gone = []
        for request_id, (owner, ask, waiter) in list(self._asking.items()):
            if owner != cell:
                continue
            del self._asking[request_id]
            self._withdrawn[request_id] = reason
            waiter.cancel()
            try:
                self.approver.withdraw(ask, reason)
            except Exception:  # an approver's bookkeeping must not keep the cell from ending
                pass
            gone.append(ask)
        return gone

    async def ask(self, tool: str, record: CallRecord, rule: str, cell: str, clock: CellClock,
                  notices: WaitingNotices | None = None, principal: str | None = None) -> None:
        """Wait for the approver's answer; sets the record's decision and approval, raises unless approved."""
        now = time.time()
        ask = ApprovalRequest(
            id=f"{self.session_id[:12]}-{record.seq}", session=self.session_id, seq=record.seq, tool=tool,
            args=record.args, args_sha256=record.args_sha256, cell_line=record.cell_line,
            source_line=record.source_line, requested=now, deadline=now + self.timeout, principal=principal,
        )
        answer: ApprovalAnswer | None = None
        if cell and cell in self._ended_cells:  # the cell ended before the call got here
            self._withdrawn[ask.id] = self._ended_cells[cell]
        else:
            answer = await self._wait(tool, ask, record, rule, cell, clock, now, notices or NoNotices())
        withdrawn = self._withdrawn.pop(ask.id, None)
        if withdrawn is not None or answer is None:  # an answer that came with the cell's end counts for nothing
            record.decision = "approval-withdrawn"
            record.approval = {"approver": self.approver.name, "answered": None, "requested": iso(now),
                               "withdrawn": utcnow(), "reason": f"its cell ended ({withdrawn})"}
            raise CallFailed("denied", f"tool {tool!r} was waiting for approval (policy rule {rule}) when its cell "
                                       f"ended ({withdrawn}); the request was withdrawn and the tool was not run")
        record.approval = {"approver": answer.approver, "answered": iso(answer.answered or time.time()),
                           "requested": iso(now), "reason": answer.reason}
        if answer.decision != "allow":
            record.decision = "approval-denied"
            raise CallFailed("denied", f"tool {tool!r} was denied by approver {answer.approver}; the policy required "
                                       f"approval (rule {rule}){': ' + answer.reason if answer.reason else ''}")
        record.decision = "approved"

    async def _wait(self, tool: str, ask: ApprovalRequest, record: CallRecord, rule: str, cell: str,
                    clock: CellClock, now: float, notices: WaitingNotices) -> ApprovalAnswer | None:
        waiter = asyncio.ensure_future(self.approver.ask(ask))
        self._asking[ask.id] = (cell, ask, waiter)
        clock.pause()
        # Shown after the approver's first step has run (tasks start in order): a queued request is
        # pending before anyone reads its notice.
        notice = Waiting(cell=cell, request=ask.id, seq=ask.seq, tool=tool, approver=self.approver.name,
                         deadline=ask.deadline)
        notices.show(notice)
        outcome: WaitOutcome = "denied"  # the approver failed: the tool is not run
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: see dispatch._run
                answer = await waiter
            outcome = ("withdrawn" if ask.id in self._withdrawn else
                       "approved" if answer.decision == "allow" else "denied")
            return answer
        except TimeoutError:
            if ask.id not in self._withdrawn:
                outcome = "timed out"
                record.decision = "approval-timeout"
                record.approval = {"approver": self.approver.name, "answered": None, "requested": iso(now)}
                raise CallFailed("denied", f"tool {tool!r} needed approval (policy rule {rule}) and no answer "
                                           f"came within {self.timeout:g} s; it was not run") from None
            outcome = "withdrawn"
            return None
        except asyncio.CancelledError:
            outcome = "withdrawn"
            if ask.id not in self._withdrawn:
                raise  # the gate itself is stopping
            return None
        finally:
            self._asking.pop(ask.id, None)
            clock.resume()
            notices.show(replace(notice, outcome=outcome))

    def close(self) -> None:
        self.approver.close()
