"""Tool calls from code in the sandbox: read off the gate's comm, served by the call path, answered in batches.

Each request (or each call of a batch) is parsed strictly (``protocol``),
attributed to the running cell it names (``CellQueue.attribute``: with
subshells several cells run at once), and handed to the ``Dispatcher``
(admission, then decision, run and record). Replies ready in the same loop turn go to the
kernel as one control message: every control message costs the kernel a
busy/idle round on IOPub, which inside gVisor dominates a call, so batching
keeps parallel calls parallel. While a call waits for a person, the cell's
frontends are shown a notice (``notices``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from cellgate.gate.calls.asking import Waiting
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.calls.protocol import CallReply, CallRequest, ProtocolError, batch_items, error_reply, parse_call
from cellgate.gate.session.cells.queue import CellQueue, CellRun
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.events import Tasks
from cellgate.gate.session.kernel.watch import KernelWatch

# Sends a notice to the frontends as a reply to the cell's execute_request header (``notices.publish``).
ShowFrontends = Callable[[dict[str, Any], Waiting], Coroutine[Any, Any, None]]


class CellNotices:
    """Shows a cell's frontends that one of its calls waits for a person, then how the wait ended."""

    def __init__(self, show: ShowFrontends, tasks: Tasks, parent: dict[str, Any]) -> None:
        self._show = show
        self._tasks = tasks
        self._parent = parent

    def show(self, notice: Waiting) -> None:
        self._tasks.spawn(self._show(self._parent, notice))


class CallRelay:
    def __init__(self, ctx: SessionContext, dispatcher: Dispatcher, cells: CellQueue, kernel: KernelWatch,
                 show: ShowFrontends) -> None:
        self.dispatcher = dispatcher
        self.cells = cells
        self.kernel = kernel
        self.events = ctx.events
        self.tasks = ctx.tasks
        self._show = show
        self._outbox: dict[str, list[CallReply]] = {}
        self._flush_scheduled = False

    def on_request(self, comm_id: str, data: Any, size: int) -> None:
        """A message on one of the gate's comms: one call, or a batch of them."""
        try:
            batch = batch_items(data, size)
        except ProtocolError as exc:
            self.events.protocol("call-rejected", reason=str(exc), comm_id=comm_id[:80])
            return  # no single id to answer: the kernel's own deadline ends its waits
        for item in batch if batch is not None else [data]:  # each call decided, recorded and answered on its own
            self._on_call(comm_id, item, size)

    def _on_call(self, comm_id: str, data: Any, size: int) -> None:
        head = self.cells.attribute(data.get("cell") if isinstance(data, dict) else None)
        try:
            request = parse_call(data, size)
        except ProtocolError as exc:
            self.events.protocol("call-rejected", reason=str(exc), comm_id=comm_id[:80])
            if head is not None:
                tool = data.get("tool") if isinstance(data, dict) else None
                self.cells.refused(head, head.refusals.note(str(tool)[:128] if isinstance(tool, str) else "(malformed)"))
            call_id = data.get("id") if isinstance(data, dict) else None
            if isinstance(call_id, str) and len(call_id) <= 64:
                self._reply(comm_id, error_reply(call_id, "invalid", f"malformed tool call: {exc}"))
            return
        notices = CellNotices(self._show, self.tasks, head.request.header) if head is not None else None
        scope = head.scope(notices) if head is not None else None
        refused = self.dispatcher.admit(request, scope)
        if refused is not None:
            if refused.event is not None:
                self.events.protocol("call-rejected", **refused.event)
            if head is not None:
                self.cells.refused(head, refused.refusal)
            self._reply(comm_id, refused.reply)
            return
        assert head is not None and scope is not None
        self.tasks.spawn(self._serve(comm_id, head, request, scope))

    def scope_now(self) -> tuple[CallScope, Callable[[Any], None]] | None:
        """The running cell's scope for a call the host makes for it (a request of the network), and how to count
        a refusal against it; None while no cell runs."""
        head = self.cells.attribute(None)
        if head is None:
            return None
        scope = head.scope(CellNotices(self._show, self.tasks, head.request.header))
        return scope, lambda verdict: self.cells.refused(head, verdict)

    async def _serve(self, comm_id: str, head: CellRun, request: CallRequest, scope: CallScope) -> None:
        answered: list[Awaitable[Any] | None] = []

        def answer(reply: CallReply) -> None:
            answered.append(self._answer(comm_id, reply))

        try:
            outcome = await self.dispatcher.serve(request, scope, answer)
            self.cells.refused(head, outcome.refusal)
        except Exception as exc:  # a bug or an unwritable journal must not leave the cell waiting
            self.events.failure(exc)
            if not answered:
                self._reply(comm_id, error_reply(request.id, "unavailable", f"the gate could not serve "
                                                 f"{request.tool!r}: {type(exc).__name__}"))
        if answered and answered[0] is not None:
            await answered[0]

    def _answer(self, comm_id: str, reply: CallReply) -> Awaitable[Any] | None:
        """A large result leaves now, on its own (its bytes on their way while its record is made: the send is
        handed to ZeroMQ before this returns); any other reply joins this loop turn's batch."""
        frames: list[bytes] = []
        data = reply.wire(frames)
        if not frames:
            self._reply(comm_id, reply)
            return None
        return self.kernel.send_control_now("comm_msg", {"comm_id": comm_id, "data": data}, frames)

    def _reply(self, comm_id: str, reply: CallReply) -> None:
        """Queue a reply; replies ready in the same loop turn go to the kernel as one message."""
        self._outbox.setdefault(comm_id, []).append(reply)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(lambda: self.tasks.spawn(self._flush()))

    async def _flush(self) -> None:
        self._flush_scheduled = False
        outbox, self._outbox = self._outbox, {}
        for comm_id, replies in outbox.items():
            frames: list[bytes] = []  # large results, as the message's binary buffers
            wired = [reply.wire(frames) for reply in replies]
            data = wired[0] if len(wired) == 1 else {"batch": wired}
            await self.kernel.send_control("comm_msg", {"comm_id": comm_id, "data": data}, frames)
