"""What binds one kernel (``SandboxLimits``), a field of every backend's request.

Plain data, importing nothing but the standard library: the local backend's lowest parts (``local.oci``,
``local.container``) build on it and run where only the standard library is (another user's interpreter in
``tests/security/test_other_users.py``; the reaper).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cellgate.gate.sandbox.settings import SandboxSettings


@dataclass(frozen=True)
class SandboxLimits:
    """What binds one kernel, however its backend enforces it (a cgroup, a pod's limits, the kernel's rlimits)."""

    memory_bytes: int = 1 << 30
    pids: int = 256
    cpus: float | None = None  # a CPU quota for the whole sandbox, in CPUs; None: no quota
    open_files: int = 1024
    tmp_bytes: int = 256 << 20
    workspace_bytes: int = 256 << 20
    # What one cell may print before the kernel itself drops the rest (the host's
    # cap is the record's; this one keeps a flood from filling the kernel's memory).
    kernel_output_bytes: int = 16 << 20
    # Address-space cap applied by the kernel, under the cgroup limit, so an
    # over-allocation is a MemoryError in the cell rather than an OOM kill.
    address_space_fraction: float = 0.9

    @property
    def address_space_bytes(self) -> int:
        return int(self.memory_bytes * self.address_space_fraction)

    @classmethod
    def from_settings(cls, box: SandboxSettings) -> SandboxLimits:
        return cls(
            memory_bytes=box.memory_mb << 20, pids=box.pids, cpus=box.cpus, open_files=box.open_files, tmp_bytes=box.tmp_mb << 20,
            workspace_bytes=box.workspace_mb << 20,
            # Far above the recorded cap, so the host still sees a long output's tail; only a flood is cut.
            kernel_output_bytes=max(32 << 20, 4 * (box.output_limit_kb << 10)),
        )


__all__ = ["SandboxLimits"]
