"""``[sandbox]`` of ``cellgate.toml``: where kernels run and what binds them, beside the backend seam.

Every backend reads it (``BackendSettings.sandbox``): the limits and timeouts of its requests are made from
it (``SandboxRequest.from_settings``), and ``backend`` names the backend (``cellgate.sandbox_backends``).
Some keys only the local backend reads (``isolation``, ``image``, ``runsc``, ``platform``, ``snapshot``, ``workspace``,
``require_hard_limits``, ``cgroup_parent``, ``sandboxes_cpu_weight``). It imports nothing of the gate but the model base and errors, so the sandbox
room and ``config`` both can.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from cellgate.gate._entry_points import entry_points
from cellgate.gate._errors import ConfigError
from cellgate.gate._model import StrictModel

CPU_WEIGHT_ENV = "CELLGATE_SANDBOXES_CPU_WEIGHT"
DEFAULT_CPU_WEIGHT = 1 / 32
BACKENDS_GROUP = "cellgate.sandbox_backends"  # name -> a SandboxBackend subclass (``sandbox.backends``)


class SandboxSettings(StrictModel):
    backend: str = Field(default="local", description="where kernels run: \"local\" (runsc on this host) or a "
                         "backend an extension installs (\"kubernetes\"), by its cellgate.sandbox_backends name")
    isolation: Literal["gvisor", "none"] = "gvisor"
    image: str = Field(default="minimal", pattern=r"^([a-z][a-z0-9_-]{0,62}|sha256:[0-9a-f]{64})$",
                       description="gVisor: the built image that is the sandbox's whole / (`cellgate image build NAME`: "
                       "\"minimal\", \"data\" or your own spec), by name or sha256:DIGEST; \"host\": the host's "
                       "own /usr and the gate's Python environment, bound read-only (development only)")
    runsc: str | None = None
    platform: Literal["systrap", "ptrace", "kvm"] | None = None
    memory_mb: int = Field(default=1024, ge=128, le=65536)
    pids: int = Field(default=256, ge=128, le=65536)
    cpus: float | None = Field(default=None, ge=0.01, le=64, description="CPUs the whole sandbox may use (a cgroup CPU "
                               "quota: 0.5 is half of one core, 2 two cores' worth); unset: no quota")
    open_files: int = Field(default=1024, ge=64, le=1 << 20)
    tmp_mb: int = Field(default=256, ge=1, le=65536)
    workspace: str | None = None
    workspace_mb: int = Field(default=256, ge=1, le=1 << 20, description="size of /workspace: its private tmpfs, or the "
                              "most free space the filesystem of a host `workspace` folder may have")
    cell_timeout: float = Field(default=600.0, gt=0)
    interrupt_grace: float = Field(default=5.0, gt=0)
    call_timeout: float = Field(default=30.0, gt=0)
    start_timeout: float = Field(default=60.0, gt=0)
    require_hard_limits: bool = Field(default=False, description="refuse to start a sandbox whose memory and pids "
                                      "limits cannot bind it as a whole (without root: no cgroup)")
    cgroup_parent: str | None = Field(default=None, description="without root: the cgroup an admin delegated to this "
                                      "user (v1: under the user's own cgroup path in each of memory and pids; "
                                      "else $CELLGATE_CGROUP_PARENT); each sandbox gets a child there")
    sandboxes_cpu_weight: float = Field(default_factory=lambda: host_cpu_weight(), description="as root: the CPU "
                                        "weight of all of the host's gVisor sandboxes together, as a fraction of one "
                                        "process's, when the cores are contended (the gate that serves them all runs "
                                        "first); host-wide, so it comes from $CELLGATE_SANDBOXES_CPU_WEIGHT, never "
                                        "from a project's cellgate.toml")
    file_limit_mb: int = Field(default=64, ge=1, le=4096, description="largest file Session.upload or download "
                               "moves in or out of the sandbox (each kept as a blob of the record)")
    output_limit_kb: int = Field(default=8192, ge=16, description="recorded output per cell; head and tail are kept")
    pool: int = Field(default=0, ge=0, le=64, description="sandboxes started ahead by servers that hand out sessions "
                                                  "(cellgate mcp serve); each is used by one session only")
    snapshot: bool = Field(default=True, description="gVisor: start each sandbox from a snapshot image of a started "
                                             "kernel, built once per configuration")
    max_message_mb: int = Field(default=64, ge=1, le=4096, description="largest message (each frame) the host reads from "
                                                              "the kernel on any channel; a larger one stops the cell")
    max_refusals_per_cell: int = Field(default=100, ge=1, le=1_000_000, description="refused tool calls a cell may make; "
                                                                          "past them the cell is stopped")
    restricted: bool = Field(default=False, description="also run cells under RestrictedPython (defense in depth)")
    allowed_imports: list[str] = Field(default_factory=list, description="restricted mode: modules beyond the default set")

    @model_validator(mode="after")
    def _message_under_memory(self) -> SandboxSettings:
        if self.max_message_mb * 2 > self.memory_mb:
            raise ValueError(f"max_message_mb = {self.max_message_mb} must be at most half of memory_mb = "
                             f"{self.memory_mb}: the host holds a message in memory while it checks it")
        return self

    @model_validator(mode="after")
    def _cpu_weight_is_the_hosts(self) -> SandboxSettings:
        # One /cellgate cgroup weighs every sandbox on the host against every gate: a project's config (which may
        # be anyone's) must not set it for the others.
        if "sandboxes_cpu_weight" in self.model_fields_set:
            raise ValueError(f"sandboxes_cpu_weight = {self.sandboxes_cpu_weight!r}: this is a host-wide setting "
                             f"(one cgroup weighs every sandbox on the host), not a project's; remove it from "
                             f"cellgate.toml and set ${CPU_WEIGHT_ENV} in the environment of this host's gates")
        return self

    @field_validator("backend")
    @classmethod
    def _backend(cls, name: str) -> str:
        if name == "local":  # the core's own; the others are looked up (slow: every installed distribution)
            return name
        installed = sorted({"local", *(entry.name for entry in entry_points(group=BACKENDS_GROUP))})
        if name not in installed:
            raise ValueError(f"{name!r} is not an installed sandbox backend (installed: {', '.join(installed)}); "
                             "use one of those, or install the package that provides it (e.g. cellgate[kubernetes])")
        return name

    @field_validator("allowed_imports")
    @classmethod
    def _modules(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$", name):
                raise ValueError(f"{name!r} is not a module name (no leading underscores)")
        return names


def host_cpu_weight() -> float:
    """``sandboxes_cpu_weight``: ``$CELLGATE_SANDBOXES_CPU_WEIGHT`` (a fraction of one process's weight, over 0
    and at most 64), else 1/32."""
    text = os.environ.get(CPU_WEIGHT_ENV)
    if text is None:
        return DEFAULT_CPU_WEIGHT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 64:  # also NaN
        raise ConfigError(f"{CPU_WEIGHT_ENV}={text[:40]!r} is not a number over 0 and at most 64 (a fraction of one "
                         f"process's CPU weight, e.g. 0.03125); fix or unset it")
    return value
