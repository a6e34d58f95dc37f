"""The kernel's life as the host sees it: its control socket, interrupts, kills, and how it dies.

The host interrupts a cell past its timeout and kills the kernel when the
interrupt does not stop it, when a cell spends its refusal budget, or when
the kernel sends a frame over the size bound. When the kernel's process ends,
the running cell's lost output is recovered from its log and every queued cell
ends with how the kernel went: ``killed`` (by the host), ``memory`` (the OOM
watch saw the cgroup's limit hit) or ``kernel-died``; an exit the frontend
asked for is not a death. A restart of a kernel that had not died (the
frontend's shutdown_request with restart, or a kill to restart it) is
journalled as ``kernel-restarted`` (reason ``frontend``), which the audit
notebook shows as a note: the next cell runs without the old variables.


The keeper owns the sandbox's handle, the host's own control socket, the
kernel's output ledger (``output_ledger``) and the OOM watch; it never imports
the cells: it tells them through the ``KernelListener`` it was made with.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import zmq
import zmq.asyncio
from jupyter_client.session import Session

from cellgate.gate.audit.cells import CellStatus
from cellgate.gate.sandbox.backend import MemoryWatch, SandboxHandle
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.kernel.output_ledger import OutputLedger, settle
from cellgate.gate.session.kernel.overflow import reopen


def signing_session(key: str | bytes) -> Session:
    """A ``jupyter_client`` session that signs with ``key`` and reads JSON strictly (never pickle)."""
    return Session(
        key=key if isinstance(key, bytes) else key.encode(), signature_scheme="hmac-sha256", check_pid=False,
        unpacker="cellgate.gate.calls.protocol.strict_loads",
    )


@dataclass(frozen=True)
class KernelEnd:
    """How the kernel's end ends the cells that ran on it: their status, the limit they hit, and (when the end
    itself is why) the error each running cell records."""

    status: CellStatus
    reason: str
    error: dict[str, str] | None = None


class KernelListener(Protocol):
    """What the keeper tells the cells (``cells.queue.CellQueue``), which it never imports."""

    def any_running(self) -> bool: ...

    def recover_output(self, lost: Callable[[str], Iterable[dict[str, Any]]]) -> None:
        """Capture, for each running cell (by its msg_id), the outputs the kernel's log has and IOPub lost."""

    def mark(self, end: KernelEnd) -> None:
        """The running cells end this way when the kernel is gone (a kill the host sends next)."""

    def kernel_ended(self, end: KernelEnd) -> None:
        """The kernel is gone: every queued cell ends (``end.error`` for the running ones, if any)."""

    def kernel_gone(self, event: str) -> None:
        """The kernel's process ended, journalled as ``event`` (kernel-exited, kernel-died or kernel-killed)."""


class KernelWatch:
    def __init__(self, ctx: SessionContext, listener: KernelListener) -> None:
        self.events = ctx.events
        self.tasks = ctx.tasks
        self.bounds = ctx.bounds
        self._recorder = ctx.recorder
        self._cells = listener
        self.ledger = OutputLedger(None)  # the current kernel's, made on attach
        self.sandbox: SandboxHandle | None = None
        self.session = signing_session(os.urandom(32).hex())  # each sandbox's own key, set on attach
        self.control: zmq.asyncio.Socket | None = None  # the host's own control connection
        self.iopub: zmq.asyncio.Socket | None = None
        self.exit_expected = False
        self.stopping = False
        # The kernel let go of its sockets for a checkpoint (``session.live``): its connections drop and come
        # back (or are made anew) until this loop time; no frame was refused, whatever the monitors see.
        self.reconnecting_until = 0.0
        self.died = False  # the current kernel's death (or the host's kill of it) was recorded
        self._exited: SandboxHandle | None = None  # ended while its exit was expected (a checkpoint's)
        self._killed_by_host: SandboxHandle | None = None
        # How the cells of a kernel the host kills end: {sandbox id: (cell status, reason)}.
        self._kill_status: dict[str, tuple[CellStatus, str]] = {}
        self._oom: MemoryWatch | None = None

    def attached(self, sandbox: SandboxHandle, control: zmq.asyncio.Socket, iopub: zmq.asyncio.Socket) -> None:
        self.sandbox = sandbox
        self.exit_expected = self.died = False
        self.session = signing_session(sandbox.key)  # never the frontends' key (relaywire)
        self.control = control
        self.iopub = iopub
        self.ledger = OutputLedger(sandbox.backend.output_log(sandbox))
        if self._oom is not None:
            self._oom.close()
        self._oom = sandbox.backend.watch_memory(
            sandbox, lambda: self.events.life("memory-limit-hit", sandbox=sandbox.id))
        if self._oom is None:
            self.events.life("memory-accounting-unavailable", note="an OOM kill will be reported as kernel-died")
        self.tasks.spawn(self._watch_process(sandbox), kernel=True)

    def detached(self, reason: str) -> None:
        """The relay stopped relaying to the kernel (``reason``: restart, shutdown, session-ended)."""
        if reason == "restart" and self.sandbox is not None and not self.died:
            # A death is explained where it happened; this restart only here.
            self.events.write(lambda: self._recorder.kernel_restarted("frontend", None))
        self.control = self.iopub = None
        self.sandbox = None

    def close(self) -> None:
        if self._oom is not None:
            self._oom.close()

    # ------------------------------------------------------ control
    async def send_control(self, msg_type: str, content: dict[str, Any], buffers: Sequence[bytes] = ()) -> None:
        sent = self.send_control_now(msg_type, content, buffers)
        if sent is not None:
            await sent

    def send_control_now(self, msg_type: str, content: dict[str, Any],
                         buffers: Sequence[bytes] = ()) -> Awaitable[Any] | None:
        """Hand a control message to ZeroMQ now (sent at once unless earlier sends still wait); await what this
        returns for it to be sent. None: no kernel is attached (it was detached while this waited its turn)."""
        if self.control is None or self.control.closed:
            return None
        msg = self.session.msg(msg_type, content)
        return self.control.send_multipart([*self.session.serialize(msg), *buffers], copy=False)

    async def interrupt(self) -> None:
        """Send the kernel an interrupt_request on control (as a notebook's interrupt does)."""
        await self.send_control("interrupt_request", {})

    def interrupt_soon(self) -> None:
        self.tasks.spawn(self.interrupt())

    def kill_soon(self) -> bool:
        """Kill the current kernel (False if none is attached)."""
        if self.sandbox is None:
            return False
        self.tasks.spawn(self._kill(self.sandbox))
        return True

    async def _kill(self, sandbox: SandboxHandle) -> None:
        self._killed_by_host = sandbox
        await asyncio.get_running_loop().run_in_executor(None, sandbox.backend.kill, sandbox)

    def cpu_source(self) -> CpuSource:
        box = self.sandbox
        return CpuSource(None, None) if box is None else box.backend.cpu_source(box)

    # ------------------------------------------------------ overflow and death
    def overflow(self, channel: str, sock: zmq.asyncio.Socket, endpoint: str, sandbox: SandboxHandle) -> None:
        """A frame over the bound was refused with its connection, and messages behind it were lost:
        the relay reconnects; a running cell cannot be trusted to finish, so it ends `error` and the
        kernel is stopped (Session restarts it)."""
        if self.sandbox is not sandbox or self.stopping:
            return
        if asyncio.get_running_loop().time() < self.reconnecting_until:
            return  # the relay connects anew after a checkpoint (``Relay.reconnect_kernel``)
        limit = self.bounds.max_message_bytes
        self.events.life("message-too-large", channel=channel, limit_bytes=limit, size=f"over {limit}",
                         note="a frame over [sandbox] max_message_mb: dropped unread with its connection")
        reopen(sock, endpoint)
        if not self._cells.any_running() or self._killed_by_host is sandbox:
            return  # between cells nothing waits on the lost messages
        self._cells.mark(KernelEnd("error", "message-size", {"ename": "MessageTooLarge", "evalue": (
            f"the kernel sent a message over the {limit >> 20} MB limit ([sandbox] max_message_mb) on its "
            f"{channel} channel; the host dropped it unread and stopped the kernel; every variable is gone")}))
        self._kill_status[sandbox.id] = ("error", "message-size")
        self.tasks.spawn(self._kill(sandbox))

    async def _watch_process(self, sandbox: SandboxHandle) -> None:
        ended = await asyncio.get_running_loop().run_in_executor(None, sandbox.backend.wait, sandbox)
        code = ended.exit_code
        if self.sandbox is not sandbox or self.stopping or (self.died and self._exited is sandbox):
            return
        if self.exit_expected:
            self._exited = sandbox
            self.events.life("kernel-exited", exit_code=code)
            self._cells.kernel_gone("kernel-exited")
            return
        await self._recover_output()
        if self.sandbox is not sandbox or self.stopping:
            return
        self.died = True
        killed_by_host, kill_status = self._killed_by_host is sandbox, self._kill_status.pop(sandbox.id, None)
        # The memory limit first: a cell that crawls at the limit passes its timeout, and the host's kill then
        # races the OOM kill; whichever ended it, the limit it reached is why (issue 29: a 5 GiB allocation
        # under load ended as `timeout`).
        if ended.state == "memory" or (self._oom is not None and self._oom.hit):
            self.events.life("kernel-died", exit_code=code, cause="memory",
                             **({"killed_by_host": True} if killed_by_host else {}))
            self._cells.kernel_gone("kernel-died")
            self._cells.kernel_ended(KernelEnd("memory", "memory", {"ename": "SandboxMemoryLimit", "evalue": (
                f"the sandbox reached its {sandbox.memory_limit_bytes >> 20} MB memory limit "
                "([sandbox] memory_mb) and its kernel was killed; every variable is gone")}))
            return
        if killed_by_host:
            self.events.life("kernel-killed", exit_code=code)
            self._cells.kernel_gone("kernel-killed")
            status, reason = kill_status or ("killed", "killed-by-host")
            self._cells.kernel_ended(KernelEnd(status, reason))
            return
        self.events.life("kernel-died", exit_code=code)
        self._cells.kernel_gone("kernel-died")
        self._cells.kernel_ended(KernelEnd("kernel-died", "kernel-died"))

    def checkpoint_failed(self) -> bool:
        """The checkpoint the kernel paused for failed: its exit is a death again. gVisor ends a sandbox whose save
        failed; if this one ended so, that is its death, recorded now (its cells end). True: the kernel is gone."""
        self.exit_expected = False
        sandbox = self.sandbox
        if sandbox is None:
            return False
        if self._exited is not sandbox and sandbox.backend.status(sandbox).state == "running":
            return False
        self._exited = sandbox  # its death is recorded here, not again when its wait returns
        self.died = True
        self.events.life("kernel-died", cause="checkpoint-failed")
        self._cells.kernel_ended(KernelEnd("kernel-died", "kernel-died"))
        return True

    async def _recover_output(self) -> None:
        """The kernel died: record the running cell's output that its log has and IOPub never delivered."""
        await settle(self.iopub)
        self._cells.recover_output(self.ledger.recover)

    # ------------------------------------------------------ the output ledger
    def seen(self, msg: dict[str, Any]) -> None:
        """An IOPub message of the kernel's, numbered by it: gaps are lost messages."""
        self.ledger.seen(msg)

    def output_received(self, msg_id: str, output: dict[str, Any]) -> None:
        self.ledger.received(msg_id, output)

    def outputs_lost(self) -> int:
        """How many of the kernel's output messages never arrived (since last asked)."""
        return self.ledger.lost()
