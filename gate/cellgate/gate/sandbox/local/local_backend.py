"""The ``local`` sandbox backend: runsc on this host (``container.Sandbox``), as cellgate always ran.

Everything it does is the ``Sandbox``'s own (run folder, snapshot starts,
rootless, cgroups, the reaper); this module only answers the backend's
questions with it: the ipc sockets' connection info, the cgroup OOM watch
(``oom``), the CPU clock's source (``cpuclock``), the kernel's output log, and
leftovers reaped by owner record (``leftovers``). Interrupts go on the control
channel (the kernel's ``interrupt_mode`` is ``message``), so ``interrupt``
keeps the default.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from typing_extensions import override

from cellgate.gate._errors import SandboxError
from cellgate.gate.sandbox.backend import (
    BackendSettings,
    Checkpointed,
    MemoryWatch,
    SandboxBackend,
    SandboxHandle,
    SandboxRequest,
    SandboxStatus,
)
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.sandbox.images import store as images
from cellgate.gate.sandbox.images.store import HOST, Image
from cellgate.gate.sandbox.local import cpu_weight, enforcement, leftovers
from cellgate.gate.sandbox.local.container import Sandbox, SandboxConfig, run_root
from cellgate.gate.sandbox.local.oci import OUTPUT_LOG
from cellgate.gate.sandbox.local.oom import OomWatch
from cellgate.gate.sandbox.local.runsc import Runsc
from cellgate.gate.sandbox.local.runsc import find as find_runsc


class LocalHandle(SandboxHandle):
    """A local sandbox: the ``Sandbox`` itself, and its process, which the KernelManager polls."""

    def __init__(self, sandbox: Sandbox, backend: LocalBackend, request: SandboxRequest) -> None:
        super().__init__(sandbox.id, backend, request)
        self.sandbox = sandbox
        self.process = sandbox.process
        self.memory: OomWatch | None = None  # set by ``watch_memory``


class LocalBackend(SandboxBackend):
    """Kernels in gVisor (or, for development, ``isolation = "none"``, not sandboxed) on this host."""

    name = "local"
    binds_package_layer = True

    def __init__(self, settings: BackendSettings) -> None:
        super().__init__(settings)
        box = settings.sandbox
        # The runsc every sandbox of the session runs (``SandboxConfig.runsc``); None: isolation "none".
        self.runsc: Runsc | None = find_runsc(box.runsc, box.platform) if box.isolation == "gvisor" else None
        self.cpu_weight = self._weigh_sandboxes(box.sandboxes_cpu_weight) if self.runsc else None

    @staticmethod
    def _weigh_sandboxes(fraction: float) -> str | None:
        """What ``[sandbox] sandboxes_cpu_weight`` came to (``cpu_weight``), for ``runtime``; None where nothing is
        written (without root). A host that refuses it still runs sandboxes: the runtime record says why."""
        try:
            written = cpu_weight.weigh(fraction)
        except OSError as exc:
            return f"not set ({exc}): the gate's threads may wait behind busy sandboxes"
        return f"{written.read_text().strip()} in {written}" if written else None

    @override
    def runtime(self) -> dict[str, Any]:
        box = self.settings.sandbox
        where = self.runsc.describe() if self.runsc else {"runtime": "none (development only: NOT sandboxed)"}
        image = images.record_of(self._image(box.image)) if box.isolation == "gvisor" else {
            "name": "none", "digest": None, "note": "isolation none: the gate's own interpreter, NOT sandboxed"}
        if self.cpu_weight is not None:
            where["sandboxes_cpu_weight"] = self.cpu_weight
        return {**where, "limits_enforced": enforcement.report(os.geteuid() != 0, box.isolation, box.cgroup_parent,
                                                               box.cpus), "image": image}

    def launch_config(self, request: SandboxRequest) -> SandboxConfig:
        """The local launch parameters of a request: its limits and timeouts, with ``[sandbox]``'s local keys."""
        box = self.settings.sandbox
        return SandboxConfig(
            isolation=box.isolation, runsc=self.runsc, limits=request.limits, reply_wait=request.reply_wait,
            workspace=box.workspace, restricted=request.restricted,
            snapshot=box.snapshot and box.isolation == "gvisor", start_timeout=request.start_timeout,
            require_hard_limits=box.require_hard_limits, cgroup_parent=box.cgroup_parent,
            image=self._image(request.image or box.image) if box.isolation == "gvisor" else None,
            package_layer=request.package_layer,
        )

    @staticmethod
    def _image(name: str) -> Image | None:
        """The built image ``name`` means now (None: ``host``); SandboxUnavailable saying how to build a missing one."""
        return None if name == HOST else images.resolve(name)

    @staticmethod
    def _local(handle: SandboxHandle) -> LocalHandle:
        if not isinstance(handle, LocalHandle):
            raise TypeError(f"the local backend was handed a {type(handle).__name__}, not a sandbox it started")
        return handle

    @classmethod
    def _sandbox(cls, handle: SandboxHandle) -> Sandbox:
        return cls._local(handle).sandbox

    @override
    def start(self, request: SandboxRequest) -> LocalHandle:
        config = self.launch_config(request)
        if request.restore is not None:  # a live kernel's checkpoint: restored, or nothing (never a fresh kernel)
            config = replace(config, snapshot=False)
        sandbox = Sandbox(config, request.tools_files, request.key, restore=request.restore)
        try:
            self._launch(sandbox)
        except SandboxError as exc:
            sandbox.delete()
            if sandbox.image is None:
                raise
            # A snapshot that does not restore (a damaged image, a runsc that cannot) costs one
            # cold start, not the session: drop the image and start this sandbox cold.
            sandbox.discard_image()
            sandbox = Sandbox(replace(config, snapshot=False), request.tools_files, request.key)
            sandbox.snapshot_problem = f"the snapshot image did not restore: {str(exc)[:300]}"
            try:
                self._launch(sandbox)
            except BaseException:
                sandbox.delete()
                raise
        except BaseException:
            sandbox.delete()
            raise
        return LocalHandle(sandbox, self, request)

    @staticmethod
    def _launch(sandbox: Sandbox) -> None:
        sandbox.start()
        sandbox.wait_for_sockets(sandbox.config.start_timeout)

    @override
    def checkpointable(self, handle: SandboxHandle) -> bool:
        box = self._sandbox(handle)
        return box.config.isolation == "gvisor" and not box.rootless  # runsc cannot restore --rootless

    @override
    def checkpoint(self, handle: SandboxHandle, image: Path, leave_running: bool) -> Checkpointed:
        box = self._sandbox(handle)
        if box.config.isolation != "gvisor":
            raise SandboxError("only a gVisor sandbox can be checkpointed (this one runs with isolation none)")
        return Checkpointed(self.name, box.checkpoint(image, leave_running, box.config.start_timeout))

    @override
    def connection_info(self, handle: SandboxHandle) -> dict[str, Any]:
        box = self._sandbox(handle)
        # The host's side of the ipc sockets (rootless: through the socket folder's descriptor, see ``userns``).
        return {**box.ports, "transport": "ipc", "ip": box.ipc_prefix, "key": box.key,
                "signature_scheme": "hmac-sha256", "kernel_name": "cellgate"}

    @override
    def kill(self, handle: SandboxHandle) -> None:
        self._sandbox(handle).kill()

    # A memory death is told by the cgroup watch (``watch_memory``), read on the relay's loop only: its eventfd
    # is that loop's. ``wait`` and ``status``, called from other threads, say ``exited``.
    @override
    def wait(self, handle: SandboxHandle) -> SandboxStatus:
        box = self._sandbox(handle)
        if box.process is None:
            return SandboxStatus("gone")
        return SandboxStatus("exited", box.process.wait())

    @override
    def status(self, handle: SandboxHandle) -> SandboxStatus:
        box = self._sandbox(handle)
        if box.process is None:
            return SandboxStatus("gone")
        code = box.process.poll()
        return SandboxStatus("running") if code is None else SandboxStatus("exited", code)

    @override
    def delete(self, handle: SandboxHandle) -> None:
        self._sandbox(handle).delete()

    @override
    def reap(self) -> list[str]:
        return leftovers.reap_leftovers(run_root())

    @override
    def describe(self, handle: SandboxHandle) -> dict[str, Any]:
        return self._sandbox(handle).describe()

    @override
    def watch_memory(self, handle: SandboxHandle, on_hit: Callable[[], None]) -> MemoryWatch | None:
        local = self._local(handle)
        box = local.sandbox
        if local.memory is not None:
            local.memory.close()
        local.memory = watch = OomWatch(box.id, on_hit, box.memory_cgroup)
        if box.config.isolation == "gvisor" and not watch.start(asyncio.get_running_loop()):
            return None  # neither cgroup v1 nor v2 accounting: an OOM kill is reported as a death
        return watch

    @override
    def cpu_source(self, handle: SandboxHandle) -> CpuSource:
        box = self._sandbox(handle)
        if box.config.isolation == "gvisor":  # rootless: no cgroup, runsc's process tree
            return CpuSource(box.id, box.process.pid if box.rootless and box.process else None, tree=True)
        return CpuSource(None, box.process.pid if box.process is not None else None)

    @override
    def output_log(self, handle: SandboxHandle) -> Path | None:
        return self._sandbox(handle).ipc_path(OUTPUT_LOG)
