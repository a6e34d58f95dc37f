"""The ``cellgate-gvisor`` kernel provisioner.

Registered under the ``jupyter_client.kernel_provisioners`` entry point and
used in-process: by ``Session`` (and replay), and by the installed
kernelspec's kernel process (``session.launcher``), which every other
frontend launches (JupyterLab, ``jupyter console``, nbclient, papermill, in
any environment). Either way one relay (``Relay``) serves the frontend's
connection file; the kernel itself lives in gVisor, reachable only through
its ipc sockets.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextvars
import os
import secrets
import signal
import threading
import uuid
import warnings
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from typing_extensions import override

from cellgate.gate._errors import ConfigError, SessionError
from cellgate.gate.audit.record_paths import refuse_existing
from cellgate.gate.audit.recorder import CellRecord, Recorder
from cellgate.gate.calls import stubgen
from cellgate.gate.calls.approval import load_approver
from cellgate.gate.calls.direct import DirectResult
from cellgate.gate.calls.dispatch import Dispatcher
from cellgate.gate.calls.lineage import LINEAGE_EVENT
from cellgate.gate.calls.packages import TOOL_NAME, PackageInstaller
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.calls.sources import ToolSource, close_sources, configured_sources, open_all
from cellgate.gate.config import Settings
from cellgate.gate.network.certs import SessionCA
from cellgate.gate.network.proxy import NetworkGate
from cellgate.gate.network.rules import NetworkSettings
from cellgate.gate.sandbox.backend import SandboxBackend, SandboxHandle, SandboxRequest
from cellgate.gate.sandbox.backends import load_backend
from cellgate.gate.session import sealed_image
from cellgate.gate.session.bounds import HostBounds
from cellgate.gate.session.launch import (
    LaunchOptions,
    session_metadata,
    settings_for,
)
from cellgate.gate.session.package_layer import package_installer
from cellgate.gate.session.package_layer import remove as remove_package_layer
from cellgate.gate.session.relay.relay import CellTimeouts, Relay
from cellgate.gate.telemetry import load_telemetry

# Sandbox starts in flight at once, for all the sessions of the process. A start mostly waits (runsc restores the
# snapshot while the thread polls for the kernel's sockets), so asyncio's default executor (cores + 4 threads)
# made a hundred concurrent starts wait in line six at a time; with the host saturated each one took longer, and
# the line decided the rate. Past this bound starts compete for the same cores.
STARTS_AT_ONCE = 8 * (os.cpu_count() or 1)
_starts = concurrent.futures.ThreadPoolExecutor(STARTS_AT_ONCE, thread_name_prefix="cellgate-sandbox-start")

# Every session of this process whose record is open, ended by ``_end_forgotten`` when the program ends without
# ending it (a fork nobody shut down, a frontend that asked the kernel to shut down and exited, as
# `jupyter console` does). That has to run before the interpreter joins its threads: concurrent.futures joins
# every executor thread then, and the threads waiting on a running sandbox (``wait``) never end while it runs,
# so an ``atexit`` hook came too late and the program hung. ``threading._register_atexit``'s hooks run before
# any join, last registered first: ours (registered at the first start) before concurrent.futures' own.
_open: dict[int, GVisorProvisioner] = {}
_ender_registered = False


@dataclass(frozen=True)
class Started:
    """What a started session holds, from its first launch until it ends (kernel restarts keep it)."""

    settings: Settings
    registry: ToolRegistry
    sources: tuple[ToolSource, ...]
    recorder: Recorder
    service: Relay
    backend: SandboxBackend  # where the session's kernels run ([sandbox] backend)
    session_id: str
    tools_files: dict[str, str]  # the generated ``tools`` package
    packages: PackageInstaller | None = None  # ``%pip install``'s layer and tool, when [packages] allows any


class GVisorProvisioner(LocalProvisioner):
    """Launches the kernel inside gVisor behind a host-side gate and recorder.

    Launch options arrive as ``start_kernel(cellgate=LaunchOptions(...))``
    from ``Session``; a plain frontend passes none and gets ``cellgate.toml``
    from ``CELLGATE_CONFIG`` or the kernel's working directory.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.options = LaunchOptions()
        self.handle: SandboxHandle | None = None  # the running kernel's sandbox, replaced on each launch
        self._launching = False  # a launch was tried (and may have failed) since the last cleanup
        self._started: Started | None = None
        self._abandoned: set[asyncio.Future[None]] = set()  # deletions of sandboxes whose launch was given up
        # How the record ends: ``session-ended``, or ``session-paused`` with its checkpoint (``session.live``).
        self.ending: tuple[str, dict[str, Any]] = ("session-ended", {})
        self._launches = 0  # the first continues ``LaunchOptions.restore`` when given; restarts start fresh kernels

    @property
    def started(self) -> Started:
        """The started session's parts; SessionError before the first launch and after the end."""
        if self._started is None:
            raise SessionError("the session is not started; call start() or use `async with`")
        return self._started

    # Read by tests, replay and tools that look inside a session; None when not started.
    @property
    def service(self) -> Relay | None:
        return self._started.service if self._started else None

    @property
    def recorder(self) -> Recorder | None:
        return self._started.recorder if self._started else None

    @property
    def settings(self) -> Settings | None:
        return self._started.settings if self._started else None

    @property
    def registry(self) -> ToolRegistry | None:
        return self._started.registry if self._started else None

    @property
    def notebook_path(self) -> Path | None:
        return self._started.recorder.notebook_path if self._started else None

    @override
    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Called by the KernelManager before each launch, restarts included."""
        options = kwargs.pop("cellgate", None)
        if options is not None:
            if not isinstance(options, LaunchOptions):
                raise ConfigError(f"start_kernel(cellgate=...) takes a LaunchOptions, not {type(options).__name__}; "
                                  "build one with cellgate.gate.session.launch.LaunchOptions(...)")
            self.options = options
        kwargs.pop("env", None)  # the host's environment never reaches the sandbox
        cwd = kwargs.get("cwd")
        kwargs = await super().pre_launch(**kwargs)
        if self._started is None:
            settings = settings_for(self.options, cwd)
            backend = load_backend(settings.sandbox.backend)(settings)
            await asyncio.to_thread(backend.reap)
            self._started = self._start(settings, backend)
            end_at_exit(self)
        return kwargs

    def _start(self, settings: Settings, backend: SandboxBackend) -> Started:
        options = self.options
        granted = [Path(p).resolve() for p in options.tools]
        # Tools passed explicitly (--tools, Session(tools=...)) are the operator's
        # grant: allowed unless [policy] names them. Configured ones follow the policy.
        registry = options.registry or ToolRegistry.from_paths(settings.tool_paths(), granted=granted)
        session_id, runtime = uuid.uuid4().hex, backend.runtime()
        installer = package_installer(settings, backend, runtime, session_id, options.package_layer)
        if installer is not None and TOOL_NAME not in registry.names():  # a replay's registry has it, recorded
            registry.add(installer.tool())
        configured = [] if options.registry else configured_sources(settings)
        sources = open_all([*configured, *options.sources], registry)
        try:
            registry.with_policy_effects(settings.policy.effect)  # the manifest and stubs say what calls will do
            tools_files = stubgen.generate(registry.manifest(), settings.tools.call_style)
            metadata = session_metadata(settings, registry, runtime, [*settings.tool_paths(), *granted],
                                        session_id, options.metadata)
            recorder, service = self._start_relay(settings, registry, sources, metadata)
        except BaseException:
            close_sources(sources)
            remove_package_layer(installer)
            raise
        return Started(settings, registry, tuple(sources), recorder, service, backend, metadata["session_id"],
                       tools_files, installer)

    def _start_relay(self, settings: Settings, registry: ToolRegistry, sources: list[ToolSource],
                     metadata: dict[str, Any]) -> tuple[Recorder, Relay]:
        """The recorder, the gate and the relay frontends connect to, started before the first kernel."""
        options, box, session_id = self.options, settings.sandbox, metadata["session_id"]
        if options.notebook is not None:
            notebook_path = options.notebook.resolve()
            refuse_existing(notebook_path)  # the user's path: an earlier record there is never written over
        else:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            notebook_path = settings.resolve(settings.audit.dir) / f"{stamp}-{session_id[:8]}.ipynb"
        recorder = options.recorder_factory(notebook_path, metadata, open_journal=options.journal_factory)
        for source in sources:
            source.report = recorder.event
            for note in source.notes:
                recorder.event("tool-source-note", **note)
        approver = load_approver(options.approver or settings.policy.approver)
        gate = options.gate_factory(registry, log=recorder, policy=settings.policy, approver=approver,
                                    session_id=session_id, call_timeout=box.call_timeout)
        recorder.scrub = gate.secrets.scrub_record  # secrets the gate sees never reach the journal
        # The lineage its budgets and idempotency keys belong to (``calls.retry``), for a new host process that
        # continues this record (``session.launcher``): its keys then stay the same.
        recorder.event(LINEAGE_EVENT, lineage=gate.lineage.record())
        recorder.telemetry = gate.telemetry = load_telemetry(settings, metadata)
        service = Relay(
            dict(self.connection_info), gate, recorder,
            CellTimeouts(cell=box.cell_timeout, interrupt_grace=box.interrupt_grace),
            output_limit=box.output_limit_kb << 10, restricted=box.restricted,
            trusted_mime=tuple(settings.frontend.trusted_mime), allow_comms=settings.frontend.allow_comms,
            bounds=HostBounds(max_message_bytes=box.max_message_mb << 20,
                              max_refusals_per_cell=box.max_refusals_per_cell),
            on_shutdown=options.on_shutdown, on_kernel_end=options.on_kernel_end,
            network=NetworkGate(network_settings(settings), SessionCA.create(session_id[:32]), gate),
        )
        service.start()
        return recorder, service

    @override
    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Start the sandbox (ready to connect) and connect the relay to it."""
        started = self.started
        self._launching = True
        # The kernel's own key, new for each sandbox: the frontends' key never enters the sandbox,
        # and the relay re-signs every message between the two (relaywire).
        layer = started.packages.layer if started.packages is not None else None
        request = SandboxRequest.from_settings(started.settings.sandbox, started.tools_files, secrets.token_hex(32),
                                               started.session_id, package_layer=str(layer) if layer else None)
        plain = None
        if self._launches == 0 and self.options.restore is not None:
            restore = self.options.restore
            if restore.sealed_as is not None:  # a kept checkpoint: in plaintext only in the run root, only now
                plain = await asyncio.to_thread(sealed_image.unseal, Path(restore.image), restore.sealed_as)
                restore = replace(restore, image=str(plain), sealed_as=None)
            request = replace(request, restore=restore)
        self._launches += 1
        handle = self.handle = await self._start_sandbox(started.backend, request, plain)
        started.service.attach(handle)
        self.process = handle.process
        self.pid = handle.process.pid if handle.process else None
        return self.connection_info.copy()

    async def _start_sandbox(self, backend: SandboxBackend, request: SandboxRequest,
                             plain: Path | None = None) -> SandboxHandle:
        """``backend.start`` in a thread; a sandbox that starts after the launch was given up is deleted (by a task
        the provisioner owns: ``cleanup`` awaits it and raises its failure). ``plain``: an unsealed image the
        start restores from, removed when the start ends (restored: runsc holds what it still reads; or failed)."""
        context = contextvars.copy_context()  # as asyncio.to_thread carries it
        starting = asyncio.get_running_loop().run_in_executor(_starts, context.run, backend.start, request)
        if plain is not None:
            starting.add_done_callback(lambda _: sealed_image.release(plain))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            self._abandoned.add(asyncio.ensure_future(delete_when_started(backend, starting)))
            raise

    async def _settle_abandoned(self) -> None:
        """Wait for the deletion of every sandbox whose launch was given up; a deletion that failed is raised."""
        abandoned, self._abandoned = self._abandoned, set()
        failures = [r for r in await asyncio.gather(*abandoned, return_exceptions=True) if isinstance(r, Exception)]
        if failures:
            raise SessionError(f"a sandbox whose launch was given up could not be deleted: "
                               f"{type(failures[0]).__name__}: {failures[0]}") from failures[0]

    # ------------------------------------------------------------ the session's own calls (not attribute chains)
    async def interrupt(self) -> None:
        """Interrupt the running cell with an interrupt_request on control (as a notebook's interrupt does)."""
        await asyncio.to_thread(self.started.service.interrupt)

    async def iopub_heard(self, timeout: float) -> bool:
        """Whether the kernel's IOPub has reached the relay since the sandbox started (waiting up to ``timeout``)."""
        return await asyncio.wrap_future(self.started.service.iopub_heard(timeout))

    async def call_direct(self, tool: str, args: dict[str, Any]) -> DirectResult:
        """A tool call the model makes on its own turn: gated and recorded as a ``direct`` cell."""
        return await asyncio.wrap_future(self.started.service.call_direct(tool, args))

    def claim(self, principal: str) -> None:
        """Whom the session acts for, said once (``Session.claim``)."""
        self.started.service.claim(principal)

    def result_future(self, msg_id: str) -> concurrent.futures.Future[CellRecord]:
        """A future resolved with the record of the cell the frontend's ``msg_id`` starts."""
        return self.started.service.result_future(msg_id)

    def forget_result(self, msg_id: str) -> None:
        self.started.service.forget_result(msg_id)

    def expect_command(self, msg_id: str, argv: list[str], code: str) -> None:
        """The cell ``msg_id`` is ``Session.run_command``'s for ``argv``: recorded as that command."""
        self.started.service.taps.commands.expect(msg_id, argv, code)

    def forget_command(self, msg_id: str) -> None:
        self.started.service.taps.commands.forget(msg_id)

    async def running_cell(self) -> str | None:
        """The running cell, as a key of its own run, or None when none runs."""
        return await asyncio.to_thread(self.started.service.running_cell)

    @property
    def gate(self) -> Dispatcher:
        """The session's gate (a ``gate_factory``'s, when one was given)."""
        return self.started.service.dispatcher

    # A backend without a host process standing for the kernel is asked how its kernel is.
    @property
    @override
    def has_process(self) -> bool:
        return self.process is not None or (self.handle is not None and self.handle.process is None)

    @override
    async def poll(self) -> int | None:
        handle = self.handle
        if handle is None or handle.process is not None:
            return await super().poll()
        status = await asyncio.to_thread(handle.backend.status, handle)
        return None if status.state == "running" else (status.exit_code if status.exit_code is not None else -1)

    @override
    async def wait(self) -> int | None:
        handle = self.handle
        if handle is None or handle.process is not None:
            return await super().wait()
        status = await asyncio.to_thread(handle.backend.wait, handle)
        return status.exit_code if status.exit_code is not None else -1

    @override
    async def shutdown_requested(self, restart: bool = False) -> None:
        if self._started is not None:
            self._started.service.expect_exit()

    @override
    async def send_signal(self, signum: int) -> None:
        handle = self.handle
        if handle is None:
            return
        if signum == signal.SIGKILL:
            await asyncio.to_thread(handle.backend.kill, handle)
        elif signum == signal.SIGINT and self._started is not None:
            if not await asyncio.to_thread(handle.backend.interrupt, handle):
                self._started.service.interrupt()  # an interrupt_request on control

    @override
    async def kill(self, restart: bool = False) -> None:
        if self._started is not None:  # the KernelManager's kill (a restart or shutdown now): not a death
            self._started.service.expect_exit()
        handle = self.handle
        if handle is not None:
            await asyncio.to_thread(handle.backend.kill, handle)

    @override
    async def terminate(self, restart: bool = False) -> None:
        await self.kill(restart)

    @override
    async def cleanup(self, restart: bool = False) -> None:
        """Called after the kernel stopped: drop the sandbox; end the record unless restarting."""
        try:
            await asyncio.to_thread(self._end, restart)
            await super().cleanup(restart=restart)
        finally:
            await self._settle_abandoned()

    def _end(self, restart: bool) -> None:
        started = self._started
        try:
            if started is not None and self._launching:
                started.service.detach("restart" if restart else "shutdown")
        finally:  # whatever the relay did, the record ends and the sandbox goes
            try:
                # The record first: a frontend kills a kernel process that does not exit within a few
                # seconds, and the sandbox's reaper deletes it if the host is gone, the record cannot.
                if not restart and started is not None:
                    self._end_record(started)
            finally:
                handle, self._launching = self.handle, False
                if handle is not None:
                    handle.backend.delete(handle)
                    self.handle = None

    def _end_record(self, started: Started) -> None:
        self._started = None
        _open.pop(id(self), None)
        try:
            started.service.stop()
        finally:
            ending, data = self.ending
            started.recorder.close(ending, **data)
            close_sources(list(started.sources))
            remove_package_layer(started.packages)

    def _end_at_exit(self) -> None:
        """The program is ending with this session running: end it, saying so in the record and a ResourceWarning."""
        started = self._started
        if started is None:
            return
        warnings.warn(f"the session of {started.recorder.notebook_path} was still running when the program ended, "
                      "and was ended then (sandbox deleted, record closed with reason 'program-exit'); end each "
                      "session, forks included, with `async with` or `await session.aclose()`",
                      ResourceWarning, stacklevel=1)
        event, data = self.ending
        self.ending = (event, {**data, "reason": "program-exit",
                               "note": "the program ended without shutting the session down"})
        self._end(restart=False)

    @override
    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return max(recommended, 5.0)

    @override
    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        return max(recommended, 10.0)


def end_at_exit(provisioner: GVisorProvisioner) -> None:
    """End ``provisioner``'s session when the program ends, unless it ended before (``_end_record``)."""
    global _ender_registered
    _open[id(provisioner)] = provisioner
    if not _ender_registered:
        # CPython's hook for "before the threads are joined"; where there is none, the latest atexit can do.
        register = getattr(threading, "_register_atexit", None) or atexit.register
        register(_end_forgotten)
        _ender_registered = True


def _end_forgotten() -> None:
    """At the program's end: every session still running is ended, all at once (a runsc delete each), each on
    a thread of its own: one that fails stops none of the others."""
    enders = [threading.Thread(target=_end_one, args=(p,), name="cellgate-end-at-exit") for p in _open.values()]
    for ender in enders:
        ender.start()
    for ender in enders:
        ender.join()


def _end_one(provisioner: GVisorProvisioner) -> None:
    try:
        provisioner._end_at_exit()
    # The program is ending: say what could not be ended and go on.
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"a session still running when the program ended could not be ended: "
                      f"{type(exc).__name__}: {exc}", ResourceWarning, stacklevel=1)
    finally:
        _open.pop(id(provisioner), None)


async def delete_when_started(backend: SandboxBackend, starting: asyncio.Future[SandboxHandle]) -> None:
    """Delete the sandbox a given-up launch still started (a start that failed left none)."""
    try:
        handle = await starting
    except Exception:
        return  # nothing started; the launch that wanted it was already given up
    await asyncio.to_thread(backend.delete, handle)


def network_settings(settings: Settings) -> NetworkSettings:
    """``[network]`` with its ``upstream_ca`` found beside the config that names it."""
    network = settings.network
    if network.upstream_ca is None:
        return network
    return network.model_copy(update={"upstream_ca": str(settings.resolve(network.upstream_ca))})
