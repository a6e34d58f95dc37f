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
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.session import Session

from cellgate.gate.audit.cells import CellStatus
from cellgate.gate.sandbox.backend import MemoryWatch, SandboxHandle
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.session.bounds import HostBounds, reopen
from cellgate.gate.session.cells import CellQueue
from cellgate.gate.session.events import RelayEvents, Tasks
from cellgate.gate.session.output_ledger import settle


def signing_session(key: str | bytes) -> Session:
    """A ``jupyter_client`` session that signs with ``key`` and reads JSON strictly (never pickle)."""
    return Session(
        key=key if isinstance(key, bytes) else key.encode(), signature_scheme="hmac-sha256", check_pid=False,
        unpacker="cellgate.gate.calls.protocol.strict_loads",
    )


class KernelWatch:
    def __init__(self, cells: CellQueue, events: RelayEvents, tasks: Tasks, bounds: HostBounds) -> None:
        self.cells = cells
        self.events = events
        self.tasks = tasks
        self.bounds = bounds
        self.sandbox: SandboxHandle | None = None
        self.session = signing_session(os.urandom(32).hex())  # each sandbox's own key, set on attach
        self.control: zmq.asyncio.Socket | None = None  # the host's own control connection
        self.iopub: zmq.asyncio.Socket | None = None
        self.exit_expected = False
        self.stopping = False
        self.died = False  # the current kernel's death (or the host's kill of it) was recorded
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
            self.events.write(lambda: self.cells.recorder.kernel_restarted("frontend", None))
        self.control = self.iopub = None
        self.sandbox = None

    def close(self) -> None:
        if self._oom is not None:
            self._oom.close()

    # ------------------------------------------------------ control
    async def send_control(self, msg_type: str, content: dict[str, Any]) -> None:
        if self.control is None or self.control.closed:  # the kernel was detached while this waited its turn
            return
        msg = self.session.msg(msg_type, content)
        await self.control.send_multipart(self.session.serialize(msg))

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
        limit = self.bounds.max_message_bytes
        self.events.life("message-too-large", channel=channel, limit_bytes=limit, size=f"over {limit}",
                         note="a frame over [sandbox] max_message_mb: dropped unread with its connection")
        reopen(sock, endpoint)
        heads = self.cells.heads()
        if not heads or self._killed_by_host is sandbox:
            return  # between cells nothing waits on the lost messages
        for head in heads:
            head.end.error = {"ename": "MessageTooLarge", "evalue": (
                f"the kernel sent a message over the {limit >> 20} MB limit ([sandbox] max_message_mb) on its "
                f"{channel} channel; the host dropped it unread and stopped the kernel; every variable is gone")}
            head.end.hit("message-size")
        self._kill_status[sandbox.id] = ("error", "message-size")
        self.tasks.spawn(self._kill(sandbox))

    async def _watch_process(self, sandbox: SandboxHandle) -> None:
        ended = await asyncio.get_running_loop().run_in_executor(None, sandbox.backend.wait, sandbox)
        code = ended.exit_code
        if self.sandbox is not sandbox or self.stopping:
            return
        if self.exit_expected:
            self.events.life("kernel-exited", exit_code=code)
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
            for head in self.cells.heads():
                head.end.error = {"ename": "SandboxMemoryLimit", "evalue": (
                    f"the sandbox reached its {sandbox.memory_limit_bytes >> 20} MB memory limit "
                    "([sandbox] memory_mb) and its kernel was killed; every variable is gone")}
            self.cells.fail_all("memory", "memory")
            return
        if killed_by_host:
            self.events.life("kernel-killed", exit_code=code)
            status, reason = kill_status or ("killed", "killed-by-host")
            self.cells.fail_all(status, reason)
            return
        self.events.life("kernel-died", exit_code=code)
        self.cells.fail_all("kernel-died", "kernel-died")

    async def _recover_output(self) -> None:
        """The kernel died: record the running cell's output that its log has and IOPub never delivered."""
        await settle(self.iopub)
        for head in self.cells.heads():
            for output in self.cells.ledger.recover(head.record.msg_id) if self.cells.ledger is not None else ():
                self.cells.capture(head, output)
