"""The CPU weight of all of a host's sandboxes together, against its other processes (as root).

As root runsc makes each sandbox's cgroup under one parent, ``/cellgate`` (``oci.spec``'s ``cgroupsPath``). The
gate serves every sandbox: when it waits for a core, every session's calls, replies and output wait with it.
With many sandboxes on few cores (runsc 20240729's systrap polls while idle, so a hundred idle sandboxes fill two
cores), the scheduler weighed that one parent like one process against the gate process (a single autogroup
where the kernel groups by session), and each wake-up of a gate thread waited its turn behind the sandboxes: 100
sessions' calls took 40 s, where a 1 MB call takes 0.1 s alone. Giving the parent a small share of one
process's weight (``[sandbox] sandboxes_cpu_weight``) lets the gate's threads run as soon as they wake; the
sandboxes still have every core the host leaves idle, and share among themselves as before.

Without root there is no such parent (runsc makes no cgroup; a delegated one is the admin's): nothing is
written. Nothing is written outside ``/cellgate``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PARENT", "weigh"]

ROOT = Path("/sys/fs/cgroup")
PARENT = "cellgate"  # every sandbox's cgroup is /cellgate/<sandbox id> (``oci.spec``)
V1_FULL = 1024  # cpu.shares of one nice-0 process
V2_FULL = 100  # cpu.weight of one ordinary cgroup


def weigh(fraction: float, root: Path = ROOT) -> Path | None:
    """As root, set the sandboxes' parent cgroup's CPU weight to ``fraction`` of one process's (v1 ``cpu.shares``,
    v2 ``cpu.weight``), making the parent if runsc has not yet; returns the file written, or None where there is
    nothing to write (not root; no CPU controller). An OSError is raised: a host whose cgroups refuse root."""
    if os.geteuid() != 0:
        return None
    if (root / "cgroup.controllers").is_file():  # v2: one hierarchy, the CPU controller handed down to /cellgate
        if "cpu" not in (root / "cgroup.controllers").read_text().split():
            return None
        if "cpu" not in (root / "cgroup.subtree_control").read_text().split():
            (root / "cgroup.subtree_control").write_text("+cpu")
        target = root / PARENT / "cpu.weight"
        value = max(1, round(V2_FULL * fraction))
    else:
        if not (root / "cpu").is_dir():
            return None
        target = root / "cpu" / PARENT / "cpu.shares"
        value = max(2, round(V1_FULL * fraction))  # the kernel's least
    target.parent.mkdir(mode=0o755, exist_ok=True)
    target.write_text(str(value))
    return target
