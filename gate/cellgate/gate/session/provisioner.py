"""The ``cellgate-gvisor`` kernel provisioner.

Registered under the ``jupyter_client.kernel_provisioners`` entry point, so
every frontend that launches the ``cellgate`` kernelspec (JupyterLab,
``jupyter console``, nbclient, papermill, our ``Session``) gets the same
sandbox, gate and audit notebook. The frontend's connection file points at
the host-side relay (``Relay``); the kernel itself lives in gVisor,
reachable only through its ipc sockets.
"""

from __future__ import annotations

import asyncio
import platform
import secrets
import signal
import uuid
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jupyter_client.provisioning import LocalProvisioner
from pydantic import ValidationError

from cellgate.gate._errors import ConfigError, SandboxError
from cellgate.gate._model import validation_problems
from cellgate.gate._versions import versions
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.calls import stubgen
from cellgate.gate.calls.approval import load_approver
from cellgate.gate.calls.dispatch import Dispatcher
from cellgate.gate.calls.policy import policy_sha256
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.calls.sources import ToolSource, close_sources, open_sources
from cellgate.gate.config import SandboxSettings, Settings, find_config, load_settings
from cellgate.gate.sandbox import oci
from cellgate.gate.sandbox.container import Sandbox, SandboxConfig, reap_leftovers
from cellgate.gate.sandbox.runsc import find as find_runsc
from cellgate.gate.session.bounds import HostBounds
from cellgate.gate.session.relay import CellTimeouts, Relay


def settings_for(options: dict[str, Any], cwd: str | None) -> Settings:
    settings = options.get("settings") or load_settings(find_config(options.get("config"), cwd), cwd)
    sandbox_overrides = {k: v for k, v in (options.get("sandbox") or {}).items() if v is not None}
    if sandbox_overrides:
        try:  # validated like the file's own [sandbox] table
            sandbox = SandboxSettings.model_validate({**settings.sandbox.model_dump(), **sandbox_overrides})
        except ValidationError as exc:
            raise ConfigError(f"sandbox options: {'; '.join(validation_problems(exc))}") from None
        settings = settings.model_copy(update={"sandbox": sandbox})
    return settings


class GVisorProvisioner(LocalProvisioner):  # type: ignore[misc]
    """Launches the kernel inside gVisor behind a host-side gate and recorder.

    Launch options arrive as ``start_kernel(cellgate={...})`` (``config``,
    ``tools``, ``notebook``, ``sandbox`` overrides) from ``Session``; a plain
    frontend passes none and gets ``cellgate.toml`` from ``CELLGATE_CONFIG``
    or the kernel's working directory.
    """

    service: Relay | None = None
    sandbox: Sandbox | None = None
    settings: Settings | None = None
    recorder: Recorder | None = None
    sources: list[ToolSource] = []
    _options: dict[str, Any] | None = None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Called by the KernelManager before each launch, restarts included."""
        options = kwargs.pop("cellgate", None)
        if options is not None:
            self._options = options
        options = self._options or {}
        kwargs.pop("env", None)  # the host's environment never reaches the sandbox
        cwd = kwargs.get("cwd")
        kwargs = await super().pre_launch(**kwargs)
        if self.service is None:
            await asyncio.to_thread(reap_leftovers)
            self.settings = settings_for(options, cwd)
            self._start_service(options)
        return kwargs

    def _start_service(self, options: dict[str, Any]) -> None:
        settings = self.settings
        assert settings is not None
        box = settings.sandbox
        self.runsc = find_runsc(box.runsc, box.platform) if box.isolation == "gvisor" else None
        granted = [Path(p).resolve() for p in options.get("tools") or []]
        tool_paths = [*settings.tool_paths(), *granted]
        # Tools passed explicitly (--tools, Session(tools=...)) are the operator's
        # grant: allowed unless [policy] names them. Configured ones follow the policy.
        self.registry = options.get("registry") or ToolRegistry.from_paths(settings.tool_paths(), granted=granted)
        self.sources = [] if options.get("registry") else open_sources(settings, self.registry)
        try:
            self._start_recording(options, settings, tool_paths)
        except BaseException:
            close_sources(self.sources)
            self.sources = []
            raise

    def _start_recording(self, options: dict[str, Any], settings: Settings, tool_paths: list[Path]) -> None:
        box = settings.sandbox
        assert self.registry is not None
        self.tools_files = stubgen.generate(self.registry.manifest())
        session_id = options.get("session_id") or uuid.uuid4().hex
        notebook = options.get("notebook")
        if notebook:
            notebook_path = Path(notebook).resolve()
        else:
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            notebook_path = settings.resolve(settings.audit.dir) / f"{stamp}-{session_id[:8]}.ipynb"
        self.limits = oci.Limits(
            memory_bytes=box.memory_mb << 20, pids=box.pids, open_files=box.open_files, tmp_bytes=box.tmp_mb << 20,
            workspace_bytes=box.workspace_mb << 20,
            # Far above the recorded cap, so the host still sees a long output's tail; only a flood is cut.
            kernel_output_bytes=max(32 << 20, 4 * (box.output_limit_kb << 10)),
        )
        metadata = {
            "session_id": session_id,
            "versions": versions(),
            "python": platform.python_version(),
            "sandbox": {
                "isolation": box.isolation,
                **(self.runsc.describe() if self.runsc else {"runtime": "none (development only: NOT sandboxed)"}),
                "limits": {"memory_mb": box.memory_mb, "pids": box.pids, "open_files": box.open_files,
                           "tmp_mb": box.tmp_mb, "cell_timeout_s": box.cell_timeout,
                           "interrupt_grace_s": box.interrupt_grace, "call_timeout_s": box.call_timeout,
                           "max_message_mb": box.max_message_mb, "max_refusals_per_cell": box.max_refusals_per_cell},
                "network": "none",
                "restricted": ({"allowed_imports": sorted(box.allowed_imports)} if box.restricted else False),
            },
            "tools": {"manifest": self.registry.manifest(), "manifest_sha256": self.registry.manifest_sha256(),
                      "sources": [str(p) for p in tool_paths] + [
                          f"mcp:{name} ({'stdio' if server.command else 'streamable HTTP'})"
                          for name, server in settings.mcp.servers.items()]},
            "policy": {"policy": settings.policy.model_dump(mode="json"), "sha256": policy_sha256(settings.policy)},
            # Read back by the Reducer: the notebook shows outputs as sanitized under these settings.
            "frontend": {"outputs": "sanitized", "trusted_mime": list(settings.frontend.trusted_mime),
                         "allow_comms": settings.frontend.allow_comms},
            **(options.get("metadata") or {}),
        }
        self.recorder = Recorder(notebook_path, metadata)
        for source in self.sources:
            source.report = self.recorder.event
            for note in source.notes:
                self.recorder.event("tool-source-note", **note)
        approver = load_approver(options.get("approver") or settings.policy.approver)
        make_gate = options.get("gate_factory") or Dispatcher
        gate = make_gate(self.registry, log=self.recorder, policy=settings.policy, approver=approver,
                         session_id=session_id, call_timeout=box.call_timeout)
        self.recorder.scrub = gate.secrets.scrub_record  # secrets the gate sees never reach the journal
        self.service = Relay(
            self.connection_info, gate, self.recorder,
            CellTimeouts(cell=box.cell_timeout, interrupt_grace=box.interrupt_grace),
            output_limit=box.output_limit_kb << 10, restricted=box.restricted,
            trusted_mime=tuple(settings.frontend.trusted_mime), allow_comms=settings.frontend.allow_comms,
            bounds=HostBounds(max_message_bytes=box.max_message_mb << 20,
                              max_refusals_per_cell=box.max_refusals_per_cell),
        )
        self.service.start()

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> dict[str, Any]:
        """Start the sandbox, wait for its sockets, and connect the relay to them."""
        assert self.settings is not None and self.service is not None
        box = self.settings.sandbox
        config = SandboxConfig(
            isolation=box.isolation, runsc=self.runsc, limits=self.limits,
            reply_wait=max(3600.0, box.call_timeout * 4), workspace=box.workspace,
            restricted=tuple(box.allowed_imports) if box.restricted else None,
            snapshot=box.snapshot and box.isolation == "gvisor", start_timeout=box.start_timeout,
        )
        # The kernel's own key, new for each sandbox: the frontends' key never enters the sandbox,
        # and the relay re-signs every message between the two (relaywire).
        sandbox = await self._start_sandbox(config, secrets.token_hex(32))
        self.service.attach(sandbox)
        self.process = sandbox.process
        self.pid = sandbox.process.pid if sandbox.process else None
        return dict(self.connection_info)

    async def _start_sandbox(self, config: SandboxConfig, key: str) -> Sandbox:
        try:
            return await self._launch(Sandbox(config, self.tools_files, key))
        except SandboxError as exc:
            failed = self.sandbox
            if failed is None or failed.image is None:
                raise
            # A snapshot that does not restore (a damaged image, a runsc that cannot) costs one
            # cold start, not the session: drop the image and start this sandbox cold.
            await asyncio.to_thread(failed.delete)
            await asyncio.to_thread(failed.discard_image)
            cold = Sandbox(replace(config, snapshot=False), self.tools_files, key)
            cold.snapshot_problem = f"the snapshot image did not restore: {str(exc)[:300]}"
            return await self._launch(cold)

    async def _launch(self, sandbox: Sandbox) -> Sandbox:
        assert self.settings is not None
        self.sandbox = sandbox
        await asyncio.to_thread(sandbox.start)
        await asyncio.to_thread(sandbox.wait_for_sockets, self.settings.sandbox.start_timeout)
        return sandbox

    async def shutdown_requested(self, restart: bool = False) -> None:
        if self.service is not None:
            self.service.expect_exit()

    async def send_signal(self, signum: int) -> None:
        if self.sandbox is None:
            return
        if signum == signal.SIGKILL:
            await asyncio.to_thread(self.sandbox.kill)
        elif signum == signal.SIGINT and self.service is not None:
            self.service.interrupt()

    async def kill(self, restart: bool = False) -> None:
        if self.sandbox is not None:
            await asyncio.to_thread(self.sandbox.kill)

    async def terminate(self, restart: bool = False) -> None:
        await self.kill(restart)

    async def cleanup(self, restart: bool = False) -> None:
        """Called after the kernel stopped: drop the sandbox; end the record unless restarting."""
        if self.service is not None and self.sandbox is not None:
            self.service.detach("restart" if restart else "shutdown")
        if self.sandbox is not None:
            await asyncio.to_thread(self.sandbox.delete)
            self.sandbox = None
        if not restart and self.service is not None:
            self.service.stop()
            self.service = None
            if self.recorder is not None:
                self.recorder.close()
        if not restart:
            await asyncio.to_thread(close_sources, self.sources)
            self.sources = []
        await super().cleanup(restart=restart)

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        return max(recommended, 5.0)

    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        return max(recommended, 10.0)

    @property
    def notebook_path(self) -> Path | None:
        return self.recorder.notebook_path if self.recorder else None
