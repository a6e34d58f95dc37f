"""The host side of one kernel: a relay between the frontends and the sandboxed kernel, on its own loop.

``Relay`` runs on its own thread with its own asyncio loop, so it works the
same under a sync ``KernelManager``, an async one, nbclient or a Jupyter
server. It binds the frontend-facing Jupyter sockets (the ones in the
connection file the frontend reads) and relays them to the sandboxed
kernel's ipc sockets. It never forwards the kernel's frames to frontends:
the kernel has its own key, and every message is rebuilt, its outputs
sanitized, and signed with the frontends' key (``relaywire``, ``sanitize``).
Each channel's pump hands a message to the channel's entry of a handler table,
which says what goes on. A session is three owners built in dependency order
around one ``SessionContext`` (recorder, journal path, task group, bounds):

- the kernel (``session.kernel``): its sandbox, control socket, output ledger,
  OOM watch, interrupts, kills, overflow and death;
- the cells (``session.cells``): the queue of cells and how each ends (its
  clock, output cap, refusals, late output; ``frontend_replies``);
- the relay (here): the sockets, the pumps, ``taps`` (what it reads on the way,
  within ``bounds``), ``call_relay`` (tool calls, served by ``calls.dispatch``)
  and ``relaywire`` (re-signing). The kernel tells the cells how it ended
  through the relay (``KernelListener``): the kernel owner never imports them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any

import zmq
import zmq.asyncio

from cellgate.gate._errors import SessionError
from cellgate.gate.audit.journal import JournalError
from cellgate.gate.audit.recorder import CellRecord, Recorder, output_dict
from cellgate.gate.calls.asking import Waiting
from cellgate.gate.calls.direct import DirectResult, serve_direct
from cellgate.gate.calls.dispatch import Dispatcher
from cellgate.gate.network.proxy import NetworkGate
from cellgate.gate.sandbox.backend import CURVE_SERVER_KEY, SandboxHandle, endpoint
from cellgate.gate.session.bounds import MAX_PARSED_CONTENT, HostBounds
from cellgate.gate.session.cells import frontend_replies
from cellgate.gate.session.cells.queue import CellQueue, CellTimeouts
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.files import FileRelay
from cellgate.gate.session.kernel.overflow import OVERFLOW_EVENTS, monitor_socket, watch_overflow
from cellgate.gate.session.kernel.watch import KernelEnd, KernelWatch, signing_session
from cellgate.gate.session.relay import notices, relaywire
from cellgate.gate.session.relay.call_relay import CallRelay
from cellgate.gate.session.relay.net_link import NetLink
from cellgate.gate.session.relay.taps import Taps
from cellgate.kernel.wire import PAUSE_COMM

__all__ = ["CellTimeouts", "Relay"]

RECONNECT_QUIET = 3.0  # seconds after a reconnect the monitors' drop events are not taken for refused frames
ROUTED = ("shell", "control", "stdin", "hb")
# What the relay does with one message on its way: the frames to send on, or None (dropped, or answered here).
Handler = Callable[[list[bytes]], Awaitable[list[bytes] | None]]


async def _unchanged(frames: list[bytes]) -> list[bytes] | None:
    return frames  # heartbeats: bytes the kernel echoes, never parsed


class Relay:
    def __init__(
        self,
        front: Mapping[str, Any],
        dispatcher: Dispatcher,
        recorder: Recorder,
        timeouts: CellTimeouts,
        output_limit: int = 8 << 20,
        restricted: bool = False,
        trusted_mime: tuple[str, ...] = (),
        allow_comms: bool = False,
        bounds: HostBounds | None = None,
        on_shutdown: Callable[[dict[str, Any]], None] | None = None,
        on_kernel_end: Callable[[str], None] | None = None,
        network: NetworkGate | None = None,
    ) -> None:
        self.trusted_mime = tuple(trusted_mime)  # passed to frontends unsanitized ([frontend] trusted_mime)
        self.allow_comms = allow_comms  # kernel comms (widgets) reach frontends ([frontend] allow_comms)
        self.front_info = front
        # Told, on the relay's thread, of each frontend's shutdown_request (its content, after the relay expects
        # the exit), and of the kernel's end (as journalled: kernel-exited, kernel-died or kernel-killed).
        self._on_shutdown = on_shutdown
        self._on_kernel_end = on_kernel_end
        self.dispatcher = dispatcher
        self.recorder = recorder
        self._front_session = signing_session(front["key"])
        self._front: dict[str, zmq.asyncio.Socket] = {}
        self._back: dict[str, zmq.asyncio.Socket] = {}
        self._monitors: list[zmq.asyncio.Socket] = []
        self._welcomed: asyncio.Event | None = None  # set by the IOPub welcome a reconnect waits for
        self._heard: asyncio.Event | None = None  # set by the first IOPub message after an attach
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._thread_main, name="cellgate-gate", daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None
        # The three owners, in dependency order: the kernel, the cells (told by the kernel through this relay), the
        # relay's own readers.
        self.context = ctx = SessionContext.create(recorder, bounds, on_failure=self._task_failed)
        self.tasks, self.events, self.bounds = ctx.tasks, ctx.events, ctx.bounds
        self.kernel = KernelWatch(ctx, listener=self)
        self.cells = CellQueue(ctx, dispatcher, self.kernel, timeouts, output_limit, self._answer_frontend)
        self.calls = CallRelay(ctx, dispatcher, self.cells, self.kernel, self._show_frontends)
        self.files = FileRelay(self.kernel, ctx.events)  # Session.upload / download (``files``)
        self.taps = Taps(ctx, self.cells, self.kernel, self.calls, self.files, self._front_session, restricted)
        # The sandbox's HTTP(S) clients, through the kernel's tunnel to the network gate (``net_link``).
        self.net = NetLink(ctx, network, self.cells, self.kernel, self.calls.scope_now) if network else None
        self.taps.net = self.net
        # What each channel's pump does with a message, by direction.
        self._to_kernel: dict[str, Handler] = {
            "shell": self._shell_request, "control": self._control_request, "stdin": self._input_reply,
            "hb": _unchanged}
        self._to_front: dict[str, Handler] = {
            "shell": self._shell_reply, "control": self._control_reply, "stdin": self._input_request,
            "hb": _unchanged}

    # ------------------------------------------------------------ thread API
    def start(self) -> None:
        # nbformat compiles its output schema on first use (a second or more on a busy host): here,
        # not on the relay's loop in the middle of a cell's output.
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

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float = 60) -> Any:
        assert self.loop is not None
        name = getattr(coro, "__name__", "a step")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            # Where the relay's thread is, so a stuck or starved loop can be told apart.
            frame = sys._current_frames().get(self._thread.ident or -1)
            where = "".join(traceback.format_stack(frame)[-6:]) if frame is not None else "(its thread is gone)\n"
            raise SessionError(f"the relay did not finish {name} within {timeout:g} s; its thread was at:\n"
                               f"{where}") from None

    def attach(self, sandbox: SandboxHandle) -> None:
        """Connect to a started sandbox's sockets (its backend's ``start`` returned: they are ready)."""
        self._call(self._attach(sandbox))

    def iopub_heard(self, timeout: float) -> concurrent.futures.Future[bool]:
        """Whether the kernel's IOPub has reached the relay since it attached, waiting up to ``timeout`` s. Until
        the kernel's side has the relay's subscription, what it publishes (a first cell's output) reaches nobody."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(self._iopub_heard(timeout), self.loop)

    async def _iopub_heard(self, timeout: float) -> bool:
        heard = self._heard
        if heard is None:
            return False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await heard.wait()
        return heard.is_set()

    def interrupt(self) -> None:
        """Send the kernel an interrupt_request on control (as the cell timeout does); a cell the kernel has not
        started yet is interrupted again when it starts."""
        self._call(self._interrupt())

    async def _interrupt(self) -> None:
        running = self.cells.running()
        if running is not None and not running.started_in_kernel:
            running.interrupt_when_started = True
        await self.kernel.interrupt()

    def call_direct(self, tool: str, args: dict[str, Any]) -> concurrent.futures.Future[DirectResult]:
        """A tool call the model makes on its own turn: gated and recorded as a ``direct`` cell."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(self._direct(tool, args), self.loop)

    async def _direct(self, tool: str, args: dict[str, Any]) -> DirectResult:
        if self.cells.running() is not None:
            raise SessionError(f"tool {tool!r} cannot be called directly while a cell is running; "
                               "wait for the cell to end")
        return await serve_direct(self.dispatcher, self.recorder, tool, args)

    def running_cell(self) -> str | None:
        """The running cell (the first sent, of any shell) as a key of its own run (a msg_id may be reused), or
        None; asked on the relay's loop."""
        result: str | None = self._call(self._running_cell())
        return result

    async def _running_cell(self) -> str | None:
        running = self.cells.running()
        return running.key if running is not None else None

    def claim(self, principal: str) -> None:
        """Whom the session acts for, said once: policy rules that name ``principals`` match its calls from then on."""
        held = self.dispatcher.principal
        if held not in (None, principal):
            raise SessionError(f"this session acts for {held!r}, not {principal!r}")
        self.dispatcher.principal = principal

    def expect_exit(self) -> None:
        """The frontend asked the kernel to shut down: its exit is not a death."""
        self.kernel.exit_expected = True

    def pause_kernel(self, leave_running: bool) -> None:
        """Ask the kernel to let go of its sockets for a checkpoint (``cellgate.kernel.hibernate``); SessionError
        while a cell runs. Unless its sandbox is ``leave_running`` (a fork's parent), its stop is no death."""
        self._call(self._pause_kernel(leave_running))

    def pause_failed(self) -> bool:
        """The checkpoint failed: the kernel took its sockets up again (then connect anew), or its sandbox ended
        with the checkpoint (then that is its death). True: the kernel is gone."""
        return bool(self._call(self._pause_failed()))

    async def _pause_failed(self) -> bool:
        if self.kernel.checkpoint_failed():
            return True
        await self._reconnect_kernel()
        return False

    async def _pause_kernel(self, leave_running: bool) -> None:
        running = self.cells.running()
        if running is not None:
            raise SessionError("the session cannot be checkpointed while a cell runs (or a tool call it made waits); "
                               "wait for the cell to end, or interrupt it, then checkpoint")
        if self.kernel.control is None:
            raise SessionError("the session has no kernel to checkpoint (it died or was stopped); restart it first")
        if not leave_running:
            self.kernel.exit_expected = True
        self.kernel.reconnecting_until = float("inf")
        await self.kernel.send_control("comm_msg", {"comm_id": PAUSE_COMM, "data": {"op": "pause"}})

    def reconnect_kernel(self) -> None:
        """The paused kernel took up its sockets again in its own sandbox (a fork's parent, a failed checkpoint):
        connect every socket anew, since an old connection may hang on a listener the kernel let go of."""
        self._call(self._reconnect_kernel())

    async def _reconnect_kernel(self) -> None:
        sandbox = self.kernel.sandbox
        if sandbox is None:
            return
        info = sandbox.backend.connection_info(sandbox)
        self._welcomed = welcomed = asyncio.Event()
        sockets = [*self._back.items(), *([("control", self.kernel.control)] if self.kernel.control else [])]
        for channel, sock in sockets:
            address = endpoint(info, channel)
            with contextlib.suppress(zmq.ZMQError):
                sock.disconnect(address)
            sock.connect(address)
        # Until the kernel welcomes the new IOPub subscription, what it publishes reaches nobody.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(RECONNECT_QUIET):
                await welcomed.wait()
        self._welcomed = None
        # The monitors see these drops and returns for a moment more; none of them is a refused frame.
        self.kernel.reconnecting_until = asyncio.get_running_loop().time() + RECONNECT_QUIET

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
        return self.cells.results.future(msg_id)

    def forget_result(self, msg_id: str) -> None:
        self.cells.results.forget(msg_id)

    def protocol_counts(self) -> dict[str, int]:
        """How many hostile or malformed inputs of each kind this session has seen."""
        return self.events.protocol_counts()

    # ------------------------------------------ what the kernel tells the cells (``kernel.watch.KernelListener``)
    def any_running(self) -> bool:
        return self.cells.any_running()

    def recover_output(self, lost: Callable[[str], Iterable[dict[str, Any]]]) -> None:
        self.cells.recover_output(lost)

    def mark(self, end: KernelEnd) -> None:
        self.cells.mark(end)

    def kernel_ended(self, end: KernelEnd) -> None:
        self.cells.kernel_ended(end)

    def kernel_gone(self, event: str) -> None:
        if self._on_kernel_end is not None:
            self._on_kernel_end(event)

    # ------------------------------------------------------------- sockets
    def _front_url(self, channel: str) -> str:
        return endpoint(self.front_info, channel)

    async def _bind_front(self) -> None:
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

    def _connect(self, kind: int, endpoint: str, identity: bytes | None = None,
                 curve_server_key: str | None = None) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(kind)
        sock.linger = 0
        if curve_server_key:  # the kernel encrypts its channels (CurveZMQ): connect as a client with a key pair
            sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
            sock.curve_serverkey = curve_server_key.encode()
        # Every socket that reads from the kernel refuses a frame over the bound before
        # allocating it; libzmq then drops the connection, which watch_overflow sees.
        sock.setsockopt(zmq.MAXMSGSIZE, self.bounds.max_message_bytes)
        if kind == zmq.SUB:
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        if identity is not None:
            sock.identity = identity
        sock.connect(endpoint)
        return sock

    async def _attach(self, sandbox: SandboxHandle) -> None:
        if self.tasks.failure is not None:
            raise SessionError(f"the session's gate stopped ({self.tasks.failure}); start a new session")
        # The kernel answers input() on stdin to the identity that sent the
        # execute_request on shell, so both relay sockets share one identity
        # (as every Jupyter client's shell and stdin sockets do).
        identity = os.urandom(16).hex().encode()
        backend = sandbox.backend
        info = backend.connection_info(sandbox)
        curve = info.get(CURVE_SERVER_KEY)
        for channel in ROUTED:
            self._back[channel] = self._connect(zmq.DEALER, endpoint(info, channel),
                                                identity if channel in ("shell", "stdin") else None, curve)
        self._heard = asyncio.Event()  # before the subscription goes out: its welcome may come at once
        self._back["iopub"] = self._connect(zmq.SUB, endpoint(info, "iopub"), curve_server_key=curve)
        control = self._connect(zmq.DEALER, endpoint(info, "control"), curve_server_key=curve)
        for channel, sock in [*self._back.items(), ("control (host)", control)]:
            monitor = monitor_socket(sock, OVERFLOW_EVENTS)
            self._monitors.append(monitor)
            address = endpoint(info, "control" if channel == "control (host)" else channel)
            overflow = functools.partial(self.kernel.overflow, channel, sock, address, sandbox)
            self.tasks.spawn(watch_overflow(monitor, overflow), kernel=True)
        for channel in ROUTED:  # named by what each pumps: a failure says which
            self.tasks.spawn(self._pump_to_kernel(channel), kernel=True, name=f"Relay._pump_to_kernel({channel})")
            self.tasks.spawn(self._pump_to_front(channel), kernel=True, name=f"Relay._pump_to_front({channel})")
        self.tasks.spawn(self._pump_iopub(), kernel=True)
        self.tasks.spawn(self._drain(control), kernel=True)
        self.kernel.attached(sandbox, control, self._back["iopub"])
        if self.net is not None:
            self.net.attached()
        self.cells.saw_count(0)  # a new kernel counts from the start
        self.recorder.kernel_attached(backend.describe(sandbox))
        if self.cells:
            self.cells.start_head()

    async def _detach(self, reason: str) -> None:
        await self.tasks.end_kernel()
        control = self.kernel.control
        for sock in [*self._back.values(), *([control] if control else [])]:
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
            sock.close(linger=0)
        for monitor in self._monitors:
            monitor.close(linger=0)
        self._monitors.clear()
        self._back.clear()
        self.kernel.control = None
        self.cells.fail_all("killed", reason)
        self.kernel.detached(reason)

    async def _stop(self) -> None:
        self.kernel.stopping = True
        self.cells.late.close()
        counts = self.events.protocol_counts()
        if counts:
            self.events.life("protocol-event-counts", counts=counts)
        if self.kernel.sandbox is not None:
            await self._detach("session-ended")
        self.kernel.close()
        await self.tasks.end_session()
        for sock in self._front.values():
            sock.close(linger=0)
        abandoned = self.dispatcher.close()
        if abandoned:  # their threads cannot be stopped; as daemons they do not keep the process alive
            self.events.life("calls-abandoned", calls=[dataclasses.asdict(call) for call in abandoned],
                             reason="the session ended while their tools still ran (past [sandbox] call_timeout)")

    async def _task_failed(self, task: str, exc: BaseException) -> None:
        """A task of the relay failed (a bug; ``Tasks`` cancelled its siblings): the session ends here. The failure
        is recorded, the kernel stopped (nothing runs that is not relayed), and every cell waiting or sent
        later is refused with the reason instead of waiting for ever."""
        self.events.failure(exc, task=task, note="the relay stopped and its kernel was killed; start a new session")
        sandbox = self.kernel.sandbox
        try:
            await self._detach("gate-error")  # the queued cells end `killed` (limit gate-error)
            if sandbox is not None:
                self.kernel.stopping = True  # its end is this failure's, not a death to explain
                await asyncio.get_running_loop().run_in_executor(None, sandbox.backend.kill, sandbox)
        finally:  # whatever the cleanup did, nobody waits for ever
            self.cells.results.fail(SessionError(f"the session's gate stopped: {self.tasks.failure}; "
                                                 "start a new session"))

    # --------------------------------------------------------------- pumps
    async def _pump(self, src: zmq.asyncio.Socket, dst: zmq.asyncio.Socket, handle: Handler) -> None:
        while True:
            out = await handle(await src.recv_multipart())
            if out is not None:
                await dst.send_multipart(out)

    def _pump_to_kernel(self, channel: str) -> Coroutine[Any, Any, None]:
        return self._pump(self._front[channel], self._back[channel], self._to_kernel[channel])

    def _pump_to_front(self, channel: str) -> Coroutine[Any, Any, None]:
        return self._pump(self._back[channel], self._front[channel], self._to_front[channel])

    # ------------------------------------------------------------- handlers, frontend to kernel
    async def _shell_request(self, frames: list[bytes]) -> list[bytes] | None:
        if not self.taps.request(frames):
            return None  # answered by the host (a program restricted mode refused)
        return self._to_kernel_signed(frames, "shell")

    async def _control_request(self, frames: list[bytes]) -> list[bytes] | None:
        refusal = self.taps.control_request(frames)
        if refusal is not None:  # answered by the host (a subshell past its bound)
            await self._front["control"].send_multipart(refusal)
            return None
        across = self._to_kernel_signed(frames, "control")
        if across is not None:
            self._seen_on_control(frames)
        return across

    async def _input_reply(self, frames: list[bytes]) -> list[bytes] | None:
        return self._to_kernel_signed(frames, "stdin")

    # ------------------------------------------------------------- handlers, kernel to frontend
    async def _shell_reply(self, frames: list[bytes]) -> list[bytes] | None:
        self.taps.reply(frames)
        return self._to_front_signed(frames, "shell")

    async def _control_reply(self, frames: list[bytes]) -> list[bytes] | None:
        self.taps.control_reply(frames)
        return self._to_front_signed(frames, "control")

    async def _input_request(self, frames: list[bytes]) -> list[bytes] | None:
        if not self.taps.stdin_allowed(frames):
            return None
        return self._to_front_signed(frames, "stdin")

    def _seen_on_control(self, frames: list[bytes]) -> None:
        """A frontend's shutdown_request (an `exit` in jupyter console, a restart or shutdown from any
        frontend): the kernel's exit that follows is expected, not a death."""
        content = relaywire.shutdown_content(frames)
        if content is None:
            return
        self.expect_exit()
        if self._on_shutdown is not None:
            self._on_shutdown(content)

    def _to_kernel_signed(self, frames: list[bytes], channel: str) -> list[bytes] | None:
        """A frontend's message re-signed with the kernel's key, or None if it is bad."""
        try:
            return relaywire.resign(frames, self._front_session, self.kernel.session)
        except Exception as exc:  # hostile or malformed: dropped, journalled
            self._bad(channel, "to-kernel", exc)
            return None

    def _to_front_signed(self, frames: list[bytes], channel: str) -> list[bytes] | None:
        """A kernel's reply rebuilt, sanitized and signed with the frontends' key, or None if it is bad."""
        try:
            return relaywire.reply_frames(frames, self.kernel.session, self._front_session, self.trusted_mime,
                                          MAX_PARSED_CONTENT, self.recorder)
        except Exception as exc:  # hostile or malformed: dropped, journalled
            self._bad(channel, "to-frontend", exc)
            return None

    def _bad(self, channel: str, side: str, exc: Exception) -> None:
        self.events.protocol("protocol-error", channel=f"{channel}-{side}", error=f"{type(exc).__name__}: {exc}"[:300])

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
                forward = self.taps.iopub(frames)
            except JournalError as exc:  # not the kernel's doing: the disk under the journal failed
                self.events.failure(exc)
                continue  # frontends see what is recorded
            except Exception as exc:  # hostile input must never stop the pump
                self.events.protocol("protocol-error", channel="iopub", error=f"{type(exc).__name__}: {exc}"[:500])
                continue
            if self._heard is not None:
                self._heard.set()  # the subscription reached the kernel (``iopub_heard``)
            if forward is not None and self._welcomed is not None and \
                    forward["header"].get("msg_type") == "iopub_welcome":
                self._welcomed.set()  # the kernel sees the relay's subscription (``_reconnect_kernel``)
            out = self._iopub_out(forward) if forward is not None else None
            if out is not None:
                await dst.send_multipart(out)

    def _iopub_out(self, msg: dict[str, Any]) -> list[bytes] | None:
        """The frames frontends get for a kernel's IOPub message: rebuilt, sanitized, signed with their key."""
        try:
            out = relaywire.iopub_frames(msg, self._front_session, self.trusted_mime, self.allow_comms)
        except Exception as exc:
            self.events.protocol("protocol-error", channel="iopub", error=f"{type(exc).__name__}: {exc}"[:500])
            return None
        if out is None:
            self.events.protocol("comm-blocked", msg_type=msg["header"].get("msg_type"),
                                 target=str(msg["content"].get("target_name", ""))[:200],
                                 note="kernel comms do not reach frontends unless [frontend] allow_comms = true")
        return out

    async def _show_frontends(self, parent: dict[str, Any], notice: Waiting) -> None:
        """Show the frontends that a call of the cell ``parent`` started waits for a person (``notices``)."""
        await notices.publish(self._front_session, self._front.get("iopub"), parent, notice)

    async def _answer_frontend(self, header: dict[str, Any], idents: list[bytes], error: dict[str, Any]) -> None:
        """Answer a frontend for a cell the kernel cannot (``frontend_replies``)."""
        await frontend_replies.answer(self._front_session, self._front.get("iopub"), self._front["shell"], header,
                                      idents, error, self.cells.kernel_count)
