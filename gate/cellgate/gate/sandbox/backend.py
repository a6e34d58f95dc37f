"""The sandbox backend seam: where a session's kernels run (``[sandbox] backend``).

A backend starts one sandboxed kernel per launch and answers for it until it
is deleted; the gate only ever talks to the kernel over the Jupyter channels
whose connection info the backend gives. The seam knows no backend: each,
``local`` (``sandbox.local``: runsc on this host) like the ones extensions
install (``kubernetes``: one gVisor pod per kernel), is found by name in the
``cellgate.sandbox_backends`` entry points (``sandbox.backends``). A request
is neutral (limits, timeouts, the kernel's key and tools, an image); what only
one backend reads it takes from its own settings (``[sandbox]``'s local keys,
an extension's section). The kernel's environment is ``sandbox.environment``'s.

The lifecycle, as the provisioner and the relay drive it::

    backend = load_backend(settings.sandbox.backend)(settings)   # once per session (``sandbox.backends``)
    backend.reap()                                  # orphans of gates that are gone
    handle = backend.start(request)                 # ready: its sockets accept connections
    info = backend.connection_info(handle)          # the relay connects (ipc or tcp, CurveZMQ if keyed)
    backend.interrupt(handle) or <interrupt_request on control>
    backend.wait(handle) -> SandboxStatus           # in a worker thread: how the kernel ended
    backend.kill(handle)                            # stop it now (the host's kill, a restart)
    backend.delete(handle)                          # gone, with everything it held

The methods that block (``start``, ``kill``, ``wait``, ``status``, ``delete``,
``reap``, ``interrupt``) are called in worker threads, from more than one event
loop (the provisioner's, and the relay's own in its thread); a backend built on
an async client keeps its own loop. The others (``connection_info``,
``describe``, ``watch_memory``, ``cpu_source``, ``output_log``) are called on the
relay's event loop and must answer at once from what ``start`` learnt; the
constructor and ``runtime`` on the provisioner's, once per session. Nothing
a backend reads from the sandbox (its status, its logs, a pod's events) is
trusted beyond what the method says it returns.
"""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.checkpoints import Checkpointed as Checkpointed
from cellgate.gate.sandbox.checkpoints import Restore as Restore
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.sandbox.environment import CHANNELS as CHANNELS
from cellgate.gate.sandbox.limits import SandboxLimits as SandboxLimits
from cellgate.gate.sandbox.settings import SandboxSettings

M = TypeVar("M", bound=BaseModel)


class BackendSettings(Protocol):
    """What a backend reads of the session's settings (``cellgate.gate.config.Settings`` is one).

    An extension's backend reads its own section (``settings.section("kubernetes", Model)``, registered
    through ``cellgate.config_sections``) and ``[sandbox]``.
    """

    @property
    def sandbox(self) -> SandboxSettings: ...

    def section(self, name: str, model: type[M]) -> M: ...

    def resolve(self, path: str) -> Path: ...


@dataclass(frozen=True)
class SandboxRequest:
    """What one sandbox is started with (each launch of a session's kernel, restarts included): neutral, read
    alike by every backend. What only one backend needs it reads from its settings, never from here."""

    limits: SandboxLimits
    tools_files: Mapping[str, str]  # the generated ``tools`` package: relative path -> source, mounted read-only
    key: str  # the kernel's own HMAC key, new for each sandbox (never the frontends')
    session_id: str  # the session it serves: for labels, owners and the record
    reply_wait: float = 3600.0  # seconds the kernel waits for a tool call's reply
    start_timeout: float = 60.0  # seconds ``start`` may take until the kernel's channels accept connections
    restricted: tuple[str, ...] | None = None  # restricted mode's extra allowed imports; None: off
    image: str | None = None  # the kernel's image, for a backend that runs one; None: the backend's configured one
    labels: Mapping[str, str] = field(default_factory=dict)  # more labels a backend may attach (tenant, ...)
    # A host folder of Python packages the session installs (``calls.packages``), bound read-only at
    # ``PACKAGES_DIR`` and on the kernel's path; only a backend whose ``binds_package_layer`` is true gets one.
    package_layer: str | None = None
    restore: Restore | None = None  # a live kernel's checkpoint to continue (``checkpoint``); None: a new kernel

    @classmethod
    def from_settings(cls, box: SandboxSettings, tools_files: Mapping[str, str], key: str,
                      session_id: str, package_layer: str | None = None) -> SandboxRequest:
        """The request ``[sandbox]`` makes (every launch of a session, restarts included)."""
        return cls(SandboxLimits.from_settings(box), tools_files, key, session_id,
                   reply_wait=max(3600.0, box.call_timeout * 4), start_timeout=box.start_timeout,
                   restricted=tuple(box.allowed_imports) if box.restricted else None, package_layer=package_layer)


SandboxState = Literal["running", "exited", "memory", "gone"]


@dataclass(frozen=True)
class SandboxStatus:
    """How a sandbox is: ``running``; ``exited`` (with its exit code when known); ``memory`` (killed at its memory
    limit: a pod's ``OOMKilled``, a cgroup's OOM kill); ``gone`` (no trace of it is left, e.g. deleted by someone
    else). ``detail`` is a short reason for a person, from the backend's own words (already bounded)."""

    state: SandboxState
    exit_code: int | None = None
    detail: str = ""


class MemoryWatch(Protocol):
    """A live watch on a sandbox's memory limit (``SandboxBackend.watch_memory``)."""

    @property
    def hit(self) -> bool: ...  # the sandbox was killed at (or reached) its memory limit

    def close(self) -> None: ...


class ReportedByWait:
    """The default ``MemoryWatch``: no live notice; the backend's ``wait`` reports a memory death."""

    hit = False

    def close(self) -> None:
        pass


class SandboxHandle:
    """A started sandbox as the gate holds it: opaque but for its id and the backend that answers for it.

    Backends subclass it with what they need to find the sandbox again (a run folder, a pod's name).
    """

    def __init__(self, sandbox_id: str, backend: SandboxBackend, request: SandboxRequest) -> None:
        self.id = sandbox_id  # unique on this gate; in the record (``kernel-attached``) and in the backend's names
        self.backend = backend
        self.request = request
        # A host process that lives exactly as long as the kernel, if there is one (local: runsc): the
        # KernelManager polls it. None: the provisioner asks the backend's ``status``.
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def key(self) -> str:
        return self.request.key

    @property
    def memory_limit_bytes(self) -> int:
        return self.request.limits.memory_bytes


def endpoint(info: Mapping[str, Any], channel: str) -> str:
    """The ZMQ endpoint of ``channel`` in a Jupyter connection info (``ipc://ip-port`` or ``tcp://ip:port``)."""
    port = info[f"{channel}_port"]
    if info.get("transport", "tcp") == "ipc":
        return f"ipc://{info['ip']}-{port}"
    return f"tcp://{info['ip']}:{port}"


# Connection info: the kernel's CurveZMQ public key (Z85 text) when it encrypts its channels; the gate connects as a
# Curve client with a key pair of its own. The name is jupyter_client's (connection files, ``KernelClient``).
CURVE_SERVER_KEY = "curve_publickey"


class SandboxBackend(ABC):
    """Where a session's kernels run. One instance per session (``load_backend(name)(settings)``).

    Subclasses implement ``start``, ``connection_info``, ``kill``, ``wait``, ``status``, ``delete``, ``reap`` and
    ``describe``; the others have defaults that say "not available" (``interrupt``, ``watch_memory``,
    ``cpu_source``, ``output_log``). Errors a person must act on are ``SandboxError`` (or ``SandboxUnavailable``
    when nothing can start here) naming what failed and what to do.
    """

    name: ClassVar[str] = ""  # the name it is registered under in ``cellgate.sandbox_backends``
    binds_package_layer: ClassVar[bool] = False  # binds ``SandboxRequest.package_layer`` (``%pip install``)

    def __init__(self, settings: BackendSettings) -> None:
        self.settings = settings

    # ------------------------------------------------------------------ lifecycle
    @abstractmethod
    def start(self, request: SandboxRequest) -> SandboxHandle:
        """Start a sandboxed kernel and return once its channels accept connections (blocking; run in a thread).

        Raise ``SandboxError`` naming the reason when it does not get ready within ``request.start_timeout``
        (a pod's events, the runsc log's tail), after deleting whatever it started.
        """

    @abstractmethod
    def connection_info(self, handle: SandboxHandle) -> dict[str, Any]:
        """How the gate connects to the kernel: a Jupyter connection info dict.

        Keys: ``transport`` (``ipc`` or ``tcp``), ``ip`` (the ipc path prefix, or the address), ``shell_port``,
        ``iopub_port``, ``stdin_port``, ``control_port``, ``hb_port``, ``key``, ``signature_scheme``
        (``hmac-sha256``), and, when the kernel encrypts its channels with CurveZMQ, ``CURVE_SERVER_KEY``: its
        public key (Z85 text). The gate connects to ``endpoint(info, channel)`` for each of ``CHANNELS``.
        """

    def interrupt(self, handle: SandboxHandle) -> bool:
        """Interrupt the kernel's running cell by the backend's own means (a signal); False: the gate sends an
        ``interrupt_request`` on the control channel instead (no signal crosses a node). The default."""
        return False

    @abstractmethod
    def kill(self, handle: SandboxHandle) -> None:
        """Stop the kernel now (``wait`` then returns); what it holds stays until ``delete``. Quiet if gone."""

    @abstractmethod
    def wait(self, handle: SandboxHandle) -> SandboxStatus:
        """Block until the kernel is no longer running and say how it ended (never ``running``)."""

    @abstractmethod
    def status(self, handle: SandboxHandle) -> SandboxStatus:
        """How the sandbox is now, without waiting."""

    @abstractmethod
    def delete(self, handle: SandboxHandle) -> None:
        """Kill the kernel and release everything it held (folders, mounts, cgroups; a pod, its Secret,
        ConfigMap and NetworkPolicy). Idempotent; must not raise for a sandbox already gone."""

    @abstractmethod
    def reap(self) -> list[str]:
        """Delete the sandboxes this backend started for gate processes that are gone (found by owner record or
        label), as the next session start and ``cellgate doctor --clean`` ask; returns their ids."""

    def runtime(self) -> dict[str, Any]:
        """What the record says about where this session's kernels run, before the first starts: merged into the
        ``sandbox`` part of the session's metadata (runtime, version, platform; its keys replace what the gate would
        say of a local sandbox, e.g. ``network`` and ``limits_enforced``). JSON values; never a credential."""
        return {"backend": self.name}

    @abstractmethod
    def describe(self, handle: SandboxHandle) -> dict[str, Any]:
        """What the record says about this sandbox (``kernel-attached``): runtime, limits and how they bind,
        network, how it started. JSON values only; never a key or credential."""

    # ------------------------------------------------------------------ optional: defaults say "not available"
    def checkpointable(self, handle: SandboxHandle) -> bool:
        """Whether ``checkpoint`` works for this sandbox (and ``SandboxRequest.restore`` for one like it)."""
        return False

    def checkpoint(self, handle: SandboxHandle, image: Path, leave_running: bool) -> Checkpointed:
        """Save the paused kernel's sandbox (the kernel let go of its sockets: ``cellgate.kernel.hibernate``) into the
        new folder ``image``; the sandbox stops, or with ``leave_running`` goes on (a fork's parent) and its kernel
        resumes. A later ``start`` with ``SandboxRequest.restore`` continues it in a new sandbox."""
        raise SandboxUnavailable(f"the {self.name or type(self).__name__} sandbox backend cannot checkpoint a live "
                                 "kernel; pause, resume and fork need one that can (local gVisor as root)")

    def watch_memory(self, handle: SandboxHandle, on_hit: Callable[[], None]) -> MemoryWatch | None:
        """Watch the sandbox's memory limit from now on (called on the relay's loop when it attaches); call
        ``on_hit`` once, on that loop, when the limit is hit. After the kernel ended, the gate reports a memory
        death when ``wait`` said ``memory`` or the watch's ``hit`` is true.

        The default: no live notice, ``wait`` says ``memory`` itself. None: this backend cannot tell a memory
        kill from any other death (the record says so once, and such a death is reported as ``kernel-died``).
        """
        return ReportedByWait()

    def cpu_source(self, handle: SandboxHandle) -> CpuSource:
        """The kernel's CPU seconds for the cell clock; the default cannot read them (the clock runs on wall time)."""
        return CpuSource(None, None)

    def output_log(self, handle: SandboxHandle) -> Path | None:
        """The kernel's output log as the host can read it after a death (``cellgate.kernel.outlog``); None: the
        host cannot, and output IOPub never delivered is reported lost."""
        return None


__all__ = [
    "CHANNELS", "CURVE_SERVER_KEY", "BackendSettings", "Checkpointed", "MemoryWatch", "ReportedByWait", "Restore",
    "SandboxBackend",
    "SandboxHandle", "SandboxLimits", "SandboxRequest", "SandboxState", "SandboxStatus", "endpoint",
]
