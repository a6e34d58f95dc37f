"""The host side of one kernel: relay, gate and recorder on one event loop.

``GateService`` runs on its own thread with its own asyncio loop, so it works
the same under a sync ``KernelManager``, an async one, nbclient or a Jupyter
server. It binds the frontend-facing Jupyter sockets (the ones in the
connection file the frontend reads) and relays them to the sandboxed
kernel's ipc sockets. On the way it:

- records each ``execute_request`` the frontend sent (the host's copy of the
  program: never the kernel's account of it) as a cell, FIFO;
- serves tool calls arriving on IOPub, attributing each to the running cell
  (host state; a call when no cell runs is refused) and replying on control;
- collects each cell's outputs, enforces the wall-clock timeout (interrupt,
  grace, kill) and writes the audit notebook when the cell ends;
- keeps its own comm traffic away from frontends;
- never forwards the kernel's frames to frontends: the kernel has its own key,
  and every message is rebuilt, its outputs sanitized, and signed with the
  frontends' key (``relaywire``, ``sanitize``).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import Session

from cellgate.gate._errors import SessionError
from cellgate.gate.audit.journal import JournalError
from cellgate.gate.audit.recorder import CellRecord, Recorder, output_dict
from cellgate.gate.calls.direct import DirectResult, serve_direct
from cellgate.gate.calls.dispatch import CallContext, Gate
from cellgate.gate.calls.protocol import ProtocolError, batch_items, parse_call, strict_loads
from cellgate.gate.sandbox.container import Sandbox
from cellgate.gate.sandbox.cpuclock import CpuClock, CpuSource
from cellgate.gate.sandbox.oci import OUTPUT_LOG
from cellgate.gate.sandbox.oom import OomWatch
from cellgate.gate.session import relaywire
from cellgate.gate.session.bounds import (
    MAX_OUTPUT_VALUES,
    OVERFLOW_EVENTS,
    HostBounds,
    RefusalLedger,
    content_within,
    is_refusal,
    json_values,
    read_unparsed,
    reopen,
    watch_overflow,
)
from cellgate.gate.session.late import LateOutput
from cellgate.gate.session.output_ledger import OutputLedger, settle
from cellgate.kernel import restricted
from cellgate.kernel.wire import COMM_TARGET, MAX_REQUEST_BYTES

DELIM = b"<IDS|MSG>"
MAX_KERNEL_MESSAGE = 64 << 20  # default of [sandbox] max_message_mb (HostBounds)
# Largest content the host parses of a message that is not an output (status, replies, input requests).
MAX_PARSED_CONTENT = 1 << 20
OUTPUT_TYPES = frozenset({"stream", "display_data", "execute_result", "error"})
MAX_GATE_COMMS = 64
MAX_HEADER_BYTES = 16 << 10
MAX_METADATA_BYTES = 64 << 10
# Journal entries about hostile input, per kind, before they are only counted.
PROTOCOL_EVENTS_PER_KIND = 50
ROUTED = ("shell", "control", "stdin", "hb")
IOPUB_TYPES = frozenset({
    "status", "stream", "display_data", "update_display_data", "execute_input", "execute_result", "error",
    "clear_output", "comm_open", "comm_msg", "comm_close", "debug_event", "iopub_welcome", "shutdown_reply",
})
COMM_TYPES = frozenset({"comm_open", "comm_msg", "comm_close"})


@dataclass(frozen=True)
class CellTimeouts:
    cell: float = 600.0
    interrupt_grace: float = 5.0


@dataclass
class _Pending:
    record: CellRecord
    header: dict[str, Any]
    idents: list[bytes]
    allow_stdin: bool = False
    replied: bool = False
    limits: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None
    # Output cap: the head is recorded as it comes, the tail is held, the middle is dropped.
    out_bytes: int = 0
    tail: collections.deque[tuple[dict[str, Any], int]] = field(default_factory=collections.deque)
    tail_bytes: int = 0
    dropped_bytes: int = 0
    dropped_digest: Any = field(default_factory=hashlib.sha256)
    idle: bool = False
    reply_status: str | None = None
    timed_out: bool = False
    timer: asyncio.TimerHandle | CpuClock | None = None
    # Budget left, and how many calls wait for a person (meanwhile it is spent at the sandbox's CPU rate).
    remaining: float = 0.0
    resumed_at: float = 0.0
    waiting: int = 0
    refusals: RefusalLedger = field(default_factory=lambda: RefusalLedger(budget=100))
    # Unique per cell run (a client's msg_ids start over after a restart): what the gate withdraws approvals by.
    key: str = field(default_factory=lambda: os.urandom(8).hex())


def _session(key: str | bytes) -> Session:
    return Session(
        key=key if isinstance(key, bytes) else key.encode(), signature_scheme="hmac-sha256", check_pid=False,
        unpacker="cellgate.gate.calls.protocol.strict_loads",
    )


class GateService:
    def __init__(
        self,
        front: dict[str, Any],
        gate: Gate,
        recorder: Recorder,
        timeouts: CellTimeouts,
        output_limit: int = 8 << 20,
        restricted: bool = False,
        trusted_mime: tuple[str, ...] = (),
        allow_comms: bool = False,
        bounds: HostBounds | None = None,
    ) -> None:
        self.trusted_mime = tuple(trusted_mime)  # passed to frontends unsanitized ([frontend] trusted_mime)
        self.allow_comms = allow_comms  # kernel comms (widgets) reach frontends ([frontend] allow_comms)
        self.output_limit = output_limit
        self.bounds = bounds or HostBounds()
        self.restricted = restricted
        self.front_info = front
        self.gate = gate
        self.recorder = recorder
        self.timeouts = timeouts
        self.sandbox: Sandbox | None = None
        self._kernel_session = _session(os.urandom(32).hex())  # each sandbox's own key, set on attach
        self._front_session = _session(front["key"])
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._thread_main, name="cellgate-gate", daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._back_tasks: set[asyncio.Task[Any]] = set()
        self._back: dict[str, zmq.asyncio.Socket] = {}
        self._host_control: zmq.asyncio.Socket | None = None
        self._queue: collections.deque[_Pending] = collections.deque()
        self._gate_comms: set[str] = set()
        self._results: dict[str, concurrent.futures.Future[CellRecord]] = {}
        self._results_lock = threading.Lock()
        self._stopping = False
        self._exit_expected = False
        self._killed_by_host: Sandbox | None = None
        self._protocol_counts: collections.Counter[str] = collections.Counter()
        self._outbox: dict[str, list[dict[str, Any]]] = {}
        self._late = LateOutput(recorder, self.recorder_failure)
        self._oom: OomWatch | None = None
        self._flush_scheduled = False
        self._monitors: list[zmq.asyncio.Socket] = []
        # How the cells of a kernel the host kills end: {sandbox id: (cell status, reason)}.
        self._kill_status: dict[str, tuple[str, str]] = {}
        self._ledger: OutputLedger | None = None

    # ------------------------------------------------------------ thread API
    def start(self) -> None:
        # nbformat compiles its output schema on first use (a second or more on a busy host): here,
        # not on the gate's loop in the middle of a cell's output.
        output_dict({"header": {"msg_type": "stream"}, "content": {"name": "stdout", "text": ""}})
        self._thread.start()
        self._ready.wait(10)
        self._call(self._bind_front())

    def _thread_main(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.ctx = zmq.asyncio.Context()
        self._ready.set()
        self.loop.run_forever()
        self.loop.close()
        self.ctx.destroy(linger=0)

    def _call(self, coro: Any, timeout: float = 60) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def attach(self, sandbox: Sandbox) -> None:
        """Connect to a started sandbox's sockets (after ``wait_for_sockets``)."""
        self._call(self._attach(sandbox))

    def interrupt(self) -> None:
        """Send the kernel an interrupt_request on control (as the cell timeout does)."""
        self._call(self._interrupt())

    def call_direct(self, tool: str, args: dict[str, Any]) -> concurrent.futures.Future[DirectResult]:
        """A tool call the model makes on its own turn: gated and recorded as a ``direct`` cell."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(self._direct(tool, args), self.loop)

    async def _direct(self, tool: str, args: dict[str, Any]) -> DirectResult:
        if self._running() is not None:
            raise SessionError(f"tool {tool!r} cannot be called directly while a cell is running; "
                               "wait for the cell to end")
        return await serve_direct(self.gate, self.recorder, tool, args)

    def expect_exit(self) -> None:
        """The frontend asked the kernel to shut down: its exit is not a death."""
        self._exit_expected = True

    def detach(self, reason: str) -> None:
        """Stop relaying to the current kernel (before a restart or shutdown)."""
        self._call(self._detach(reason))

    def stop(self) -> None:
        if self.loop is None or not self._thread.is_alive():
            return
        self._call(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def result_future(self, msg_id: str) -> concurrent.futures.Future[CellRecord]:
        """A future resolved with the record of the cell started by ``msg_id``."""
        with self._results_lock:
            future = self._results.get(msg_id)
            if future is None:
                future = self._results[msg_id] = concurrent.futures.Future()
                while len(self._results) > 4096:  # frontends' cells nobody waits for
                    self._results.pop(next(iter(self._results)))
            return future

    def protocol_event(self, kind: str, **data: Any) -> None:
        """Journal hostile or malformed input, bounded per kind so a flood cannot fill the disk."""
        self._protocol_counts[kind] += 1
        count = self._protocol_counts[kind]
        try:
            if count <= PROTOCOL_EVENTS_PER_KIND:
                self.recorder.event(kind, **data)
            elif count in (PROTOCOL_EVENTS_PER_KIND + 1, 1000, 100_000):
                self.recorder.event("protocol-events-suppressed", kind=kind, count=count,
                                    note=f"further {kind} events are counted, not journalled one by one")
        except JournalError:
            pass  # a journal that cannot be written refuses every call; its failure is reported where it broke

    def protocol_counts(self) -> dict[str, int]:
        """How many hostile or malformed inputs of each kind this session has seen."""
        return dict(self._protocol_counts)

    def forget_result(self, msg_id: str) -> None:
        with self._results_lock:
            self._results.pop(msg_id, None)

    # ------------------------------------------------------------- sockets
    def _spawn(self, coro: Any, back: bool = False) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        group = self._back_tasks if back else self._tasks
        group.add(task)
        task.add_done_callback(group.discard)
        return task

    def _front_url(self, channel: str) -> str:
        info = self.front_info
        port = info[f"{channel}_port"]
        if info.get("transport", "tcp") == "ipc":
            return f"ipc://{info['ip']}-{port}"
        return f"tcp://{info['ip']}:{port}"

    async def _bind_front(self) -> None:
        self._front: dict[str, zmq.asyncio.Socket] = {}
        for channel in ROUTED:
            sock = self.ctx.socket(zmq.ROUTER)
            sock.linger = 0
            sock.router_handover = 1
            sock.bind(self._front_url(channel))
            self._front[channel] = sock
        pub = self.ctx.socket(zmq.PUB)
        pub.linger = 0
        pub.bind(self._front_url("iopub"))
        self._front["iopub"] = pub

    async def _attach(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._exit_expected = False
        self._kernel_session = _session(sandbox.key)  # never the frontends' key (relaywire)
        # The kernel answers input() on stdin to the identity that sent the
        # execute_request on shell, so both relay sockets share one identity
        # (as every Jupyter client's shell and stdin sockets do).
        identity = os.urandom(16).hex().encode()
        # Every socket that reads from the kernel refuses a frame over the bound before
        # allocating it; libzmq then drops the connection, which _watch_channel sees.
        limit = self.bounds.max_message_bytes
        for channel in ROUTED:
            sock = self.ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.setsockopt(zmq.MAXMSGSIZE, limit)
            if channel in ("shell", "stdin"):
                sock.identity = identity
            sock.connect(sandbox.endpoint(channel))
            self._back[channel] = sock
        sub = self.ctx.socket(zmq.SUB)
        sub.linger = 0
        sub.setsockopt(zmq.MAXMSGSIZE, limit)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(sandbox.endpoint("iopub"))
        self._back["iopub"] = sub
        control = self.ctx.socket(zmq.DEALER)
        control.linger = 0
        control.setsockopt(zmq.MAXMSGSIZE, limit)
        control.connect(sandbox.endpoint("control"))
        self._host_control = control
        for channel, sock in [*self._back.items(), ("control (host)", control)]:
            monitor = sock.get_monitor_socket(OVERFLOW_EVENTS)
            self._monitors.append(monitor)
            endpoint = sandbox.endpoint("control" if channel == "control (host)" else channel)
            overflow = functools.partial(self._channel_overflow, channel, sock, endpoint, sandbox)
            self._spawn(watch_overflow(monitor, overflow), back=True)
        for channel in ROUTED:
            self._spawn(self._pump_to_kernel(channel), back=True)
            self._spawn(self._pump_to_front(channel), back=True)
        self._spawn(self._pump_iopub(), back=True)
        self._spawn(self._drain(control), back=True)
        self._spawn(self._watch_process(sandbox), back=True)
        if self._oom is not None:
            self._oom.close()
        self._oom = OomWatch(sandbox.id, lambda: self._event("memory-limit-hit", sandbox=sandbox.id))
        self._ledger = OutputLedger(sandbox.path("ipc", OUTPUT_LOG))
        if sandbox.config.isolation == "gvisor" and not self._oom.start(self.loop):
            self.recorder.event("memory-accounting-unavailable", note="an OOM kill will be reported as kernel-died")
        self.recorder.event("kernel-attached", sandbox=sandbox.describe())
        if self._queue:
            self._start_head()

    async def _detach(self, reason: str) -> None:
        for task in list(self._back_tasks):
            task.cancel()
        await asyncio.gather(*self._back_tasks, return_exceptions=True)
        for sock in [*self._back.values(), *([self._host_control] if self._host_control else [])]:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
            sock.close(linger=0)
        for monitor in self._monitors:
            monitor.close(linger=0)
        self._monitors.clear()
        self._back.clear()
        self._host_control = None
        self._fail_queue("killed", reason)
        self.sandbox = None

    async def _stop(self) -> None:
        self._stopping = True
        self._late.close()
        if self._protocol_counts:
            self._event("protocol-event-counts", counts=dict(self._protocol_counts))
        if self.sandbox is not None:
            await self._detach("session-ended")
        if self._oom is not None:
            self._oom.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sock in self._front.values():
            sock.close(linger=0)
        self.gate.close()

    # --------------------------------------------------------------- pumps
    async def _pump_to_kernel(self, channel: str) -> None:
        src, dst = self._front[channel], self._back[channel]
        while True:
            frames = await src.recv_multipart()
            if channel == "shell" and not self._tap_request(frames):
                continue  # answered by the host (a program restricted mode refused)
            if channel != "hb":
                frames = self._across(frames, channel, self._front_session, self._kernel_session)
                if frames is None:
                    continue
            await dst.send_multipart(frames)

    async def _pump_to_front(self, channel: str) -> None:
        src, dst = self._back[channel], self._front[channel]
        while True:
            frames = await src.recv_multipart()
            if channel == "shell":
                self._tap_reply(frames)
            elif channel == "stdin" and not self._stdin_allowed(frames):
                continue
            if channel != "hb":
                frames = self._across(frames, channel, self._kernel_session, self._front_session)
                if frames is None:
                    continue
            await dst.send_multipart(frames)

    def _across(self, frames: list[bytes], channel: str, src: Session, dst: Session) -> list[bytes] | None:
        """A message re-signed for the other side (a kernel's rebuilt and sanitized), or None if it is bad."""
        try:
            if dst is self._front_session:
                return relaywire.reply_frames(frames, src, dst, self.trusted_mime, MAX_PARSED_CONTENT)
            return relaywire.resign(frames, src, dst)
        except Exception as exc:  # hostile or malformed: dropped, journalled
            side = "to-frontend" if dst is self._front_session else "to-kernel"
            self.protocol_event("protocol-error", channel=f"{channel}-{side}", error=f"{type(exc).__name__}: {exc}"[:300])
            return None

    def _stdin_allowed(self, frames: list[bytes]) -> bool:
        """Pass an input_request on only while a cell that allowed stdin is running (G10)."""
        head = self._running()
        parsed = self._read(frames, "stdin")
        if parsed is None:
            return False
        msg = parsed[1]
        if len(msg["content"]) > MAX_HEADER_BYTES:
            self.protocol_event("input-request-dropped", msg_type=str(msg["header"].get("msg_type"))[:80],
                                reason=f"content of {len(msg['content'])} bytes (limit {MAX_HEADER_BYTES})")
            return False
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        if head is not None and head.allow_stdin and parent_id == head.record.msg_id:
            return True
        try:
            content = content_within(msg, MAX_HEADER_BYTES)
        except ProtocolError:
            content = {}
        prompt = str(content.get("prompt", ""))[:200]
        self.protocol_event("input-request-dropped", msg_type=msg["header"].get("msg_type"), prompt=prompt,
                            reason="no running cell of this session allowed stdin")
        return False

    def _channel_overflow(self, channel: str, sock: zmq.asyncio.Socket, endpoint: str, sandbox: Sandbox) -> None:
        """A frame over the bound was refused with its connection, and messages behind it were lost:
        the relay reconnects; a running cell cannot be trusted to finish, so it ends `error` and the
        kernel is stopped (Session restarts it)."""
        if self.sandbox is not sandbox or self._stopping:
            return
        limit = self.bounds.max_message_bytes
        self.recorder.event("message-too-large", channel=channel, limit_bytes=limit, size=f"over {limit}",
                            note="a frame over [sandbox] max_message_mb: dropped unread with its connection")
        reopen(sock, endpoint)
        head = self._running()
        if head is None or self._killed_by_host is sandbox:
            return  # between cells nothing waits on the lost messages
        head.error = {"ename": "MessageTooLarge", "evalue": (
            f"the kernel sent a message over the {limit >> 20} MB limit ([sandbox] max_message_mb) on its "
            f"{channel} channel; the host dropped it unread and stopped the kernel; every variable is gone")}
        if "message-size" not in head.limits:
            head.limits.append("message-size")
        self._kill_status[sandbox.id] = ("error", "message-size")
        self._spawn(self._kill(sandbox))

    async def _drain(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            await sock.recv_multipart()  # replies to the host's own control messages

    async def _pump_iopub(self) -> None:
        src, dst = self._back["iopub"], self._front["iopub"]
        while True:
            # A ready socket does not yield to the loop: without this a flood of queued messages
            # would hold back every reply, timer and probe until the whole queue is drained.
            await asyncio.sleep(0)
            frames = await src.recv_multipart()
            try:
                forward = self._on_iopub(frames)
            except JournalError as exc:  # not the kernel's doing: the disk under the journal failed
                self.recorder_failure(exc)
                continue  # frontends see what is recorded
            except Exception as exc:  # hostile input must never stop the pump
                self.protocol_event("protocol-error", channel="iopub", error=f"{type(exc).__name__}: {exc}"[:500])
                continue
            out = self._iopub_out(forward) if forward is not None else None
            if out is not None:
                await dst.send_multipart(out)

    def _iopub_out(self, msg: dict[str, Any]) -> list[bytes] | None:
        """The frames frontends get for a kernel's IOPub message: rebuilt, sanitized, signed with their key."""
        try:
            out = relaywire.iopub_frames(msg, self._front_session, self.trusted_mime, self.allow_comms)
        except Exception as exc:
            self.protocol_event("protocol-error", channel="iopub", error=f"{type(exc).__name__}: {exc}"[:500])
            return None
        if out is None:
            self.protocol_event("comm-blocked", msg_type=msg["header"].get("msg_type"),
                                target=str(msg["content"].get("target_name", ""))[:200],
                                note="kernel comms do not reach frontends unless [frontend] allow_comms = true")
        return out

    # ---------------------------------------------------- frontend requests
    def _parse(self, session: Session, frames: list[bytes], channel: str) -> tuple[list[bytes], Any] | None:
        """(identities, message), or None after journalling why it could not be read."""
        try:
            idents, rest = session.feed_identities(frames)
            return idents, session.deserialize(rest)
        except Exception as exc:
            self.protocol_event("protocol-error", channel=channel, error=f"{type(exc).__name__}: {exc}"[:300])
            return None

    def _read(self, frames: list[bytes], channel: str) -> tuple[list[bytes], Any] | None:
        """A kernel message with its headers checked and parsed, its content left unparsed (bytes)."""
        try:
            return read_unparsed(self._kernel_session, frames, MAX_HEADER_BYTES, MAX_METADATA_BYTES)
        except Exception as exc:
            self.protocol_event("protocol-error", channel=channel, error=f"{type(exc).__name__}: {exc}"[:300])
            return None

    def _tap_request(self, frames: list[bytes]) -> bool:
        """Record an execute_request; False when the host answers it instead of the kernel."""
        parsed = self._parse(self._front_session, frames, "shell-request")
        if parsed is None:
            return True
        idents, msg = parsed
        if msg["header"].get("msg_type") != "execute_request":
            return True
        content = msg["content"]
        code = content.get("code")
        if not isinstance(code, str):
            return True
        msg_id = msg["header"]["msg_id"]
        with self._results_lock:  # a client may reuse a msg_id after a restart
            stale = self._results.get(msg_id)
            if stale is not None and stale.done():
                del self._results[msg_id]
        try:
            record = self.recorder.cell_sent(msg_id, code, bool(content.get("silent")))
        except JournalError as exc:
            # A cell that cannot be recorded is not run: answer it here, never forward it.
            evalue = f"{exc}; cellgate does not run a cell it cannot record: the operator must fix the audit storage"
            future = self.result_future(msg_id)  # the caller may not be waiting yet: it finds this one
            if not future.done():
                future.set_exception(SessionError(evalue))
            self._spawn(self._answer_frontend(msg["header"], list(idents), {
                "ename": "AuditUnavailable", "evalue": evalue, "traceback": [f"AuditUnavailable: {evalue}"],
                "execution_count": None}))
            return False
        if self.restricted:
            problems = restricted.check(code)  # compile only: nothing of the program runs on the host
            if problems:
                self._reject(record, msg["header"], list(idents), problems)
                return False
        self._queue.append(_Pending(record=record, header=msg["header"], idents=list(idents),
                                    allow_stdin=content.get("allow_stdin") is True))
        if len(self._queue) == 1:
            self._start_head()
        return True

    def _reject(self, record: CellRecord, header: dict[str, Any], idents: list[bytes], problems: list[str]) -> None:
        """Restricted mode refused the program: record it as `rejected` and answer the frontend; the kernel never sees it."""
        evalue = ("restricted mode refused this program before it ran: " + "; ".join(problems))[:4000]
        error = {"ename": "RestrictedCompileError", "evalue": evalue, "traceback": [f"RestrictedCompileError: {evalue}"]}
        try:
            self.recorder.cell_started(record)
            self.recorder.output(record, {"output_type": "error", **error})
            self.recorder.cell_ended(record, "rejected", ["restricted"], {"ename": error["ename"], "evalue": evalue})
        except Exception as exc:
            self.recorder_failure(exc)
        self.result_future(record.msg_id).set_result(record)
        self._spawn(self._answer_frontend(header, idents, {**error, "execution_count": None}))

    def _running(self) -> _Pending | None:
        return self._queue[0] if self._queue else None

    def _start_head(self) -> None:
        head = self._running()
        if head is None or head.timer is not None or self.loop is None:
            return
        self.recorder.cell_started(head.record)
        self.gate.new_cell()
        head.refusals = RefusalLedger(budget=self.bounds.max_refusals_per_cell)
        head.remaining = self.timeouts.cell
        self._arm(head)

    def _arm(self, pending: _Pending) -> None:
        assert self.loop is not None
        pending.resumed_at = self.loop.time()
        pending.timer = self.loop.call_later(pending.remaining, self._on_timeout, pending)

    def _waiting_for_person(self, pending: _Pending, waiting: bool) -> None:
        """Approval waits do not count against the cell's wall clock; the sandbox's CPU time meanwhile does."""
        if self.loop is None or pending.timed_out or self._running() is not pending:
            return
        if waiting:
            pending.waiting += 1
            if pending.waiting == 1 and pending.timer is not None:
                pending.timer.cancel()
                pending.remaining -= self.loop.time() - pending.resumed_at
                pending.timer = CpuClock(self.loop, self._cpu_source(), pending.remaining,
                                         lambda: self._on_timeout(pending))
        else:
            pending.waiting = max(0, pending.waiting - 1)
            if pending.waiting == 0:
                if isinstance(pending.timer, CpuClock):
                    pending.timer.cancel()
                    pending.remaining -= pending.timer.spent()
                self._arm(pending)

    def _cpu_source(self) -> CpuSource:
        box = self.sandbox
        if box is None:
            return CpuSource(None, None)
        if box.config.isolation == "gvisor":
            return CpuSource(box.id, None)
        return CpuSource(None, box.process.pid if box.process is not None else None)

    def _tap_reply(self, frames: list[bytes]) -> None:
        parsed = self._read(frames, "shell-reply")
        if parsed is None:
            return
        msg = parsed[1]
        if msg["header"].get("msg_type") != "execute_reply":
            return
        head = self._running()
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        if head is None or parent_id != head.record.msg_id:
            return
        try:
            content = content_within(msg, MAX_PARSED_CONTENT)
        except ProtocolError as exc:
            self.protocol_event("protocol-error", channel="shell-reply", error=str(exc)[:300])
            content = {}
        if content is None:
            size = len(msg["content"])
            self.protocol_event("message-too-large", channel="shell", size=size, limit_bytes=MAX_PARSED_CONTENT)
            content = {"status": "error", "ename": "MessageTooLarge",
                       "evalue": f"the kernel's execute_reply was {size} bytes, over the {MAX_PARSED_CONTENT} "
                                 "bytes the host reads; it was not parsed"}
        head.replied = True
        head.reply_status = str(content.get("status"))
        count = content.get("execution_count")
        if isinstance(count, int) and not isinstance(count, bool) and count != head.record.execution_count:
            self.recorder.execute_input(head.record, count)
        if content.get("status") == "error":
            head.error = {"ename": str(content.get("ename"))[:200], "evalue": str(content.get("evalue"))[:2000]}
        if head.idle or head.reply_status == "aborted":
            self._finish_head()

    # ------------------------------------------------------------- iopub
    def _on_iopub(self, frames: list[bytes]) -> dict[str, Any] | None:
        """Handle one IOPub message; returns it if frontends should see it (rebuilt by relaywire)."""
        _, rest = self._kernel_session.feed_identities(frames)
        msg_type = self._precheck(rest)
        if msg_type is None:
            return None
        msg = self._kernel_session.deserialize(rest, content=False)
        if msg["header"].get("msg_type") != msg_type:  # pragma: no cover - same bytes parsed twice
            return None
        if self._ledger is not None:
            self._ledger.seen(msg)  # numbered by the kernel: gaps are lost messages
        size = len(msg["content"])
        if msg_type in OUTPUT_TYPES and json_values(msg["content"]) > MAX_OUTPUT_VALUES:
            parsed = None  # small text, huge structure: what it would cost is counted, not paid
        else:
            parsed = content_within(msg, self.output_limit // 2 if msg_type in OUTPUT_TYPES else MAX_PARSED_CONTENT)
        if parsed is None:
            self._unread(msg, msg_type, size)
            return None
        if not isinstance(parsed, dict):
            parsed = {}
        content = msg["content"] = parsed
        if msg_type in ("comm_open", "comm_msg", "comm_close"):
            comm_id = str(content.get("comm_id"))
            if msg_type == "comm_open" and content.get("target_name") == COMM_TARGET:
                if len(self._gate_comms) >= MAX_GATE_COMMS and comm_id not in self._gate_comms:
                    self.protocol_event("protocol-error", channel="iopub",
                                        error=f"more than {MAX_GATE_COMMS} gate comms opened; ignored")
                else:
                    self._gate_comms.add(comm_id)
                return None
            if comm_id in self._gate_comms:
                if msg_type == "comm_msg":
                    self._on_call(comm_id, content.get("data"), len(rest[-1]) if rest else 0)
                else:
                    self._gate_comms.discard(comm_id)
                return None
            return msg
        head = self._running()
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        if head is None or parent_id != head.record.msg_id:
            if msg_type in ("stream", "display_data", "execute_result", "error"):
                assert self.loop is not None
                self._late.add(self.loop, str(parent_id), msg)
            return msg
        if msg_type == "status":
            if content.get("execution_state") == "idle":
                head.idle = True
                if head.replied:
                    self._finish_head()
        elif msg_type == "execute_input":
            count = content.get("execution_count")
            if isinstance(count, int) and not isinstance(count, bool):
                self.recorder.execute_input(head.record, count)
        elif msg_type in ("stream", "display_data", "execute_result", "error", "clear_output"):
            self._capture(head, output_dict(msg))
        return msg

    def _unread(self, msg: Any, msg_type: str, size: int) -> None:
        """A message too big to parse: an output is counted as dropped output (its size and digest are
        recorded); anything else is journalled. Never parsed, never forwarded (frontends see what is recorded)."""
        head = self._running()
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        if msg_type in OUTPUT_TYPES and head is not None and parent_id == head.record.msg_id:
            head.dropped_bytes += size
            head.dropped_digest.update(msg["content"])
            self.protocol_event("output-over-limit", msg_type=msg_type, size=size, limit_bytes=self.output_limit // 2)
        elif msg_type in OUTPUT_TYPES:
            self._late.unread(str(parent_id), size)
            self.protocol_event("output-over-limit", msg_type=msg_type, size=size, late=True)
        else:
            self.protocol_event("message-too-large", channel="iopub", msg_type=msg_type, size=size,
                                limit_bytes=MAX_PARSED_CONTENT)

    def _capture(self, pending: _Pending, output: dict[str, Any]) -> None:
        """Record a cell's output up to the limit: head as it comes, tail at the end, a marker between."""
        if self._ledger is not None:
            self._ledger.received(pending.record.msg_id, output)
        size = len(json.dumps(output, ensure_ascii=False))
        half = self.output_limit // 2
        if not pending.tail and not pending.dropped_bytes and pending.out_bytes + size <= half:
            pending.out_bytes += size
            self.recorder.output(pending.record, output)
            return
        pending.tail.append((output, size))
        pending.tail_bytes += size
        while pending.tail_bytes > half:
            old, old_size = pending.tail.popleft()
            pending.tail_bytes -= old_size
            pending.dropped_bytes += old_size
            pending.dropped_digest.update(json.dumps(old, ensure_ascii=False, sort_keys=True).encode())

    def _flush_tail(self, pending: _Pending) -> None:
        if pending.dropped_bytes:
            note = (f"[output truncated: {pending.dropped_bytes} bytes dropped, "
                    f"sha256={pending.dropped_digest.hexdigest()}; the cell printed more than the "
                    f"{self.output_limit} byte output limit]\n")
            self.recorder.output(pending.record, {"output_type": "stream", "name": "stderr", "text": note})
            if "output" not in pending.limits:
                pending.limits.append("output")
        while pending.tail:
            self.recorder.output(pending.record, pending.tail.popleft()[0])

    def _precheck(self, rest: list[bytes]) -> str | None:
        """Bound a message before it is parsed; returns its type, or None to drop it."""
        if len(rest) < 5:
            self.protocol_event("protocol-error", channel="iopub", error=f"{len(rest)} frames after the delimiter")
            return None
        if len(rest[1]) > MAX_HEADER_BYTES or len(rest[2]) > MAX_HEADER_BYTES or len(rest[3]) > MAX_METADATA_BYTES:
            self.protocol_event("protocol-error", channel="iopub",
                                error=f"oversize header/parent/metadata ({len(rest[1])}/{len(rest[2])}/{len(rest[3])} bytes)")
            return None
        header = strict_loads(rest[1])
        msg_type = header.get("msg_type") if isinstance(header, dict) else None
        if msg_type not in IOPUB_TYPES:
            self.protocol_event("protocol-error", channel="iopub", error=f"unknown msg_type {str(msg_type)[:80]!r}")
            return None
        if msg_type in COMM_TYPES and (len(rest[4]) > MAX_REQUEST_BYTES or len(rest) > 5):
            self.protocol_event("call-rejected", reason=f"comm message of {len(rest[4])} bytes with "
                                f"{len(rest) - 5} buffers (limit {MAX_REQUEST_BYTES} bytes, no buffers)")
            return None
        return str(msg_type)

    # --------------------------------------------------------- tool calls
    def _on_call(self, comm_id: str, data: Any, size: int) -> None:
        try:
            batch = batch_items(data, size)
        except ProtocolError as exc:
            self.protocol_event("call-rejected", reason=str(exc), comm_id=comm_id[:80])
            return  # no single id to answer: the kernel's own deadline ends its waits
        if batch is not None:
            for item in batch:  # each call decided, recorded and answered on its own
                self._on_call_one(comm_id, item, size)
            return
        self._on_call_one(comm_id, data, size)

    def _on_call_one(self, comm_id: str, data: Any, size: int) -> None:
        try:
            request = parse_call(data, size)
        except ProtocolError as exc:
            call_id = data.get("id") if isinstance(data, dict) else None
            self.protocol_event("call-rejected", reason=str(exc), comm_id=comm_id[:80])
            head = self._running()
            if head is not None:
                tool = data.get("tool") if isinstance(data, dict) else None
                self._refused(head, head.refusals.note(str(tool)[:128] if isinstance(tool, str) else "(malformed)"))
            if isinstance(call_id, str) and len(call_id) <= 64:
                self._spawn(self._reply(comm_id, {"id": call_id, "ok": False,
                                                  "error": {"kind": "invalid", "message": f"malformed tool call: {exc}"}}))
            return
        head = self._running()
        if self.recorder.journal.broken:
            self._spawn(self._reply(comm_id, {"id": request.id, "ok": False, "error": {
                "kind": "unavailable",
                "message": f"the audit journal cannot be written ({self.recorder.journal.broken}); "
                           "the gate refuses calls until the operator fixes it"}}))
            return
        if head is None:
            self.protocol_event("call-rejected", reason="no cell is running", tool=request.tool, id=request.id)
            self._spawn(self._reply(comm_id, {"id": request.id, "ok": False, "error": {
                "kind": "no_cell",
                "message": f"tool {request.tool!r} was called while no cell of this session is running; "
                           "tools can only be called from a running cell"}}))
            return
        if request.cell is not None and request.cell != head.record.msg_id:
            self.protocol_event("call-rejected", reason="late: from work an earlier cell started", tool=request.tool,
                                id=request.id, cell=request.cell[:128])
            self._spawn(self._reply(comm_id, {"id": request.id, "ok": False, "error": {
                "kind": "no_cell",
                "message": f"tool {request.tool!r} was called by work an earlier cell started (a thread that "
                           "outlived its cell); work that outlives its cell cannot act through the gate"}}))
            return
        if head.refusals.exhausted:  # past the budget: answered, counted for the summary, not recorded
            self._refused(head, head.refusals.note(request.tool))
            self._spawn(self._reply(comm_id, {"id": request.id, "ok": False, "error": {
                "kind": "budget", "message": f"this cell's {head.refusals.budget} refused calls "
                                             "([sandbox] max_refusals_per_cell) are spent; the cell is stopped"}}))
            return
        seq = self.gate.next_seq()
        cell = head.record
        context = CallContext(cell_source=cell.source, claimed_line=request.line, claimed_thread=request.thread,
                              waiting=lambda waiting: self._waiting_for_person(head, waiting),
                              intent=lambda record: self.recorder.call_started(cell, record),
                              idempotency_key=f"{self.gate.session_id}/{cell.msg_id}/{seq}", cell=head.key)
        self._spawn(self._serve(comm_id, head, request, seq, context))

    async def _serve(self, comm_id: str, pending: _Pending, request: Any, seq: int, context: CallContext) -> None:
        cell = pending.record
        try:
            reply, record = await self.gate.call(request, seq, context)
            verdict = pending.refusals.note(record.tool, record) if is_refusal(record) else "record"
            if verdict == "record":
                self.recorder.call_finished(cell, record)
            self._refused(pending, verdict)
        except Exception as exc:  # a bug or an unwritable journal must not leave the cell waiting
            self.recorder_failure(exc)
            reply = {"id": request.id, "ok": False, "error": {
                "kind": "unavailable", "message": f"the gate could not serve {request.tool!r}: {type(exc).__name__}"}}
        await self._reply(comm_id, reply)

    def _event(self, kind: str, **data: Any) -> None:
        """Journal an event of the kernel's life; a broken journal must not stop the cells from ending."""
        try:
            self.recorder.event(kind, **data)
        except JournalError:
            pass  # reported where it broke; every call is refused from then on

    def _refused(self, pending: _Pending, verdict: str) -> None:
        """Past its refusal budget a cell is stopped (its kernel killed), once."""
        if verdict != "dropped" or "refusals" in pending.limits or self._running() is not pending:
            return
        pending.limits.append("refusals")
        self.recorder.event("cell-kill", msg_id=pending.record.msg_id,
                            reason=f"more than {pending.refusals.budget} refused calls in one cell "
                                   "([sandbox] max_refusals_per_cell)")
        if self.sandbox is not None:
            self._spawn(self._kill(self.sandbox))

    def recorder_failure(self, exc: Exception) -> None:
        try:
            self.recorder.event("gate-error", error=f"{type(exc).__name__}: {exc}"[:500])
        except Exception:
            pass

    async def _reply(self, comm_id: str, data: dict[str, Any]) -> None:
        """Queue a reply; replies ready in the same loop turn go to the kernel as one message.

        Every control message costs the kernel a busy/idle round on IOPub, which
        inside gVisor dominates a call; batching keeps parallel calls parallel.
        """
        self._outbox.setdefault(comm_id, []).append(data)
        if not self._flush_scheduled and self.loop is not None:
            self._flush_scheduled = True
            self.loop.call_soon(lambda: self._spawn(self._flush_replies()))

    async def _flush_replies(self) -> None:
        self._flush_scheduled = False
        outbox, self._outbox = self._outbox, {}
        if self._host_control is None:
            return
        for comm_id, replies in outbox.items():
            data = replies[0] if len(replies) == 1 else {"batch": replies}
            msg = self._kernel_session.msg("comm_msg", {"comm_id": comm_id, "data": data})
            await self._host_control.send_multipart(self._kernel_session.serialize(msg))

    # ------------------------------------------------- timeouts and death
    def _on_timeout(self, pending: _Pending) -> None:
        if self._running() is not pending:
            return
        pending.timed_out = True
        pending.limits.append("timeout")
        self.recorder.event("cell-timeout", msg_id=pending.record.msg_id, seconds=self.timeouts.cell)
        self._spawn(self._interrupt())
        assert self.loop is not None
        pending.timer = self.loop.call_later(self.timeouts.interrupt_grace, self._on_grace_expired, pending)

    async def _interrupt(self) -> None:
        if self._host_control is None:
            return
        msg = self._kernel_session.msg("interrupt_request", {})
        await self._host_control.send_multipart(self._kernel_session.serialize(msg))

    def _on_grace_expired(self, pending: _Pending) -> None:
        if self._running() is not pending or self.sandbox is None:
            return
        self.recorder.event("cell-kill", msg_id=pending.record.msg_id,
                            reason=f"did not stop within {self.timeouts.interrupt_grace:g} s of the interrupt")
        sandbox = self.sandbox
        self._spawn(self._kill(sandbox))

    async def _kill(self, sandbox: Sandbox) -> None:
        assert self.loop is not None
        self._killed_by_host = sandbox
        await self.loop.run_in_executor(None, sandbox.kill)

    async def _watch_process(self, sandbox: Sandbox) -> None:
        assert self.loop is not None and sandbox.process is not None
        code = await self.loop.run_in_executor(None, sandbox.process.wait)
        if self.sandbox is not sandbox or self._stopping:
            return
        if self._exit_expected:
            self._event("kernel-exited", exit_code=code)
            return
        await self._recover_output()
        if self.sandbox is not sandbox or self._stopping:
            return
        if self._killed_by_host is sandbox:
            self._event("kernel-killed", exit_code=code)
            status, reason = self._kill_status.pop(sandbox.id, ("killed", "killed-by-host"))
            self._fail_queue(status, reason)
            return
        if self._oom is not None and self._oom.hit:
            self._event("kernel-died", exit_code=code, cause="memory")
            head = self._running()
            if head is not None:
                head.error = {"ename": "SandboxMemoryLimit", "evalue": (
                    f"the sandbox reached its {sandbox.config.limits.memory_bytes >> 20} MB memory limit "
                    "([sandbox] memory_mb) and its kernel was killed; every variable is gone")}
            self._fail_queue("memory", "memory")
            return
        self._event("kernel-died", exit_code=code)
        self._fail_queue("kernel-died", "kernel-died")

    async def _recover_output(self) -> None:
        """The kernel died: record the running cell's output that its log has and IOPub never delivered."""
        await settle(self._back.get("iopub"))
        head = self._running()
        if head is not None and self._ledger is not None:
            for output in self._ledger.recover(head.record.msg_id):
                self._capture(head, output)

    def _note_lost_output(self, pending: _Pending) -> None:
        lost = self._ledger.lost() if self._ledger is not None else 0
        if lost:
            self._capture(pending, {"output_type": "stream", "name": "stderr", "text":
                                    f"[cellgate: {lost} output messages lost between the kernel and the host]\n"})
            pending.limits.append("output-incomplete")

    def _fail_queue(self, status: str, reason: str) -> None:
        """End every queued cell because the kernel is gone; tell frontends."""
        while self._queue:
            pending = self._queue[0]
            if reason not in pending.limits:
                pending.limits.append(reason)
            self._spawn(self._tell_frontend_killed(pending, reason))
            self._finish_head(forced_status=status)

    async def _tell_frontend_killed(self, pending: _Pending, reason: str) -> None:
        """A killed kernel never replies: answer the frontend ourselves so it does not hang."""
        evalue = (f"the sandboxed kernel was stopped ({reason}); its variables are gone. "
                  "Restart the kernel to continue.")
        await self._answer_frontend(pending.header, pending.idents, {
            "ename": "CellKilled", "evalue": evalue, "traceback": [f"CellKilled: {evalue}"],
            "execution_count": pending.record.execution_count})

    async def _answer_frontend(self, header: dict[str, Any], idents: list[bytes], error: dict[str, Any]) -> None:
        """The error output, idle status and execute_reply a kernel would have sent for a failed cell."""
        error = {"status": "error", **error}
        session = self._front_session
        iopub = self._front.get("iopub")
        if iopub is None or iopub.closed:
            return
        for msg_type, content in (("error", {k: error[k] for k in ("ename", "evalue", "traceback")}),
                                  ("status", {"execution_state": "idle"})):
            msg = session.msg(msg_type, content, parent=header)
            await iopub.send_multipart([f"kernel.{msg_type}".encode(), *session.serialize(msg)])
        reply = session.msg("execute_reply", error, parent=header)
        await self._front["shell"].send_multipart(session.serialize(reply, ident=idents))

    def _finish_head(self, forced_status: str | None = None) -> None:
        pending = self._queue.popleft()
        if pending.timer is not None:
            pending.timer.cancel()
        record = pending.record
        status: str
        if forced_status is not None:
            status = forced_status
        elif pending.reply_status == "aborted":
            self.recorder.cell_aborted(record)  # never ran: journal only
            self.result_future(record.msg_id).set_result(record)
            if self._queue:
                self._start_head()
            return
        elif pending.timed_out:
            status = "timeout"
        elif pending.reply_status == "ok":
            status = "ok"
        elif pending.error and pending.error.get("ename") == "KeyboardInterrupt":
            status = "interrupted"
        else:
            status = "error"
        try:
            for ask in self.gate.withdraw(pending.key, status):  # nothing a cell asked for outlives it
                self.recorder.event("approval-withdrawn", msg_id=record.msg_id, request=ask.id, seq=ask.seq,
                                    tool=ask.tool, reason=f"its cell ended ({status})")
            self._note_lost_output(pending)
            self._flush_tail(pending)
            for event, data in pending.refusals.summary():
                self.recorder.event(event, msg_id=record.msg_id, **data)
            self.recorder.cell_ended(record, status, pending.limits, pending.error)
        except Exception as exc:  # the record of a cell must never leave its caller waiting
            self.recorder_failure(exc)
            record.status = record.status or status  # type: ignore[assignment]
        self.result_future(record.msg_id).set_result(record)
        if self._queue:
            self._start_head()
