"""Which sandbox limits are enforced here, and by what: as root, and as an ordinary user.

As root runsc puts each sandbox in a cgroup of its own (``/cellgate/<id>``):
memory and pids bind the sandbox as a whole. Without root, gVisor runs
``--rootless`` and ignores cgroup errors; where the system delegates a cgroup
to the user (``cgroups``), cellgate puts each sandbox in a child of it, and
memory and pids bind the sandbox as a whole again. Where it does not, no
cgroup binds it: memory binds each process (RLIMIT_AS, set by the kernel on itself before any
cell runs; every process it starts inherits it and cannot raise it), pids bind
through RLIMIT_NPROC, which gVisor's Sentry enforces (OCI ``process.rlimits``).
``report`` says so, for ``cellgate doctor`` and the notebook's sandbox metadata;
``check_rootless`` refuses a rootless start that cannot work or that the
configuration forbids, naming the cause and the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.local import cgroups, oci, userns

CGROUP_ROOT = Path("/sys/fs/cgroup")
NO_RESTORE_ROOTLESS = ("snapshot starts need root: runsc cannot restore a checkpoint --rootless, "
                       "so each sandbox starts cold")
HARD_LIMITS_FIX = ("run cellgate as root (runsc then puts each sandbox in a cgroup), have an admin delegate a "
                   f"cgroup to this user and name it in [sandbox] cgroup_parent or {cgroups.ENV_PARENT}, or set "
                   "[sandbox] require_hard_limits = false to accept per-process limits "
                   "(README: What an ordinary user gets)")


def cgroup_version() -> str | None:
    """'v2' (unified), 'v1' (a memory controller hierarchy), or None when neither is mounted."""
    if (CGROUP_ROOT / "cgroup.controllers").is_file():
        return "v2"
    return "v1" if (CGROUP_ROOT / "memory").is_dir() else None


def delegated(cgroup_parent: str | None) -> cgroups.Delegation | None:
    """The delegated cgroup a rootless sandbox would use; None also when the configured one is unusable."""
    try:
        return cgroups.find(cgroup_parent)
    except SandboxUnavailable:
        return None  # the start refuses with the cause (``check_rootless``), and doctor says it


def report(rootless: bool, isolation: str = "gvisor", cgroup_parent: str | None = None,
           cpus: float | None = None) -> dict[str, dict[str, str]]:
    """Per limit: ``enforced`` ('whole sandbox', 'per process' or 'no') and ``by`` what."""
    if isolation != "gvisor":
        nothing = {"enforced": "no", "by": "isolation none: not sandboxed"}
        return {name: dict(nothing) for name in ("memory", "pids", "cpu")}
    address_space = "RLIMIT_AS set by the kernel before any cell (MemoryError in the cell), inherited by every process"
    nproc = "RLIMIT_NPROC (OCI process.rlimits, enforced by gVisor's Sentry)"
    timeout = "no CPU quota; cell_timeout stops a cell by the wall clock"
    if not rootless:
        cgroup = f"the sandbox's cgroup ({cgroup_version() or 'missing'})"
        cpu = ({"enforced": "whole sandbox", "by": f"{cgroup} CPU quota of {cpus:g} CPUs ([sandbox] cpus); "
                                                   "cell_timeout stops a cell by the wall clock"} if cpus else
               {"enforced": "no", "by": f"{timeout} ([sandbox] cpus sets a quota); while a call waits for approval "
                                        "the cell's clock runs on the cgroup's CPU time"})
        return {
            "memory": {"enforced": "whole sandbox", "by": f"{cgroup} memory limit; per process also {address_space}"},
            "pids": {"enforced": "whole sandbox", "by": f"{cgroup} pids limit; also {nproc}"},
            "cpu": cpu,
        }
    delegation = delegated(cgroup_parent) if rootless else None
    if delegation is not None:
        def child(name: str) -> str:
            return f"the sandbox's own child of the {delegation.where(name)}: its {name} limit"

        return {
            "memory": {"enforced": "whole sandbox", "by": f"{child('memory')}; per process also {address_space}"},
            "pids": {"enforced": "whole sandbox", "by": f"{child('pids')}; also {nproc}"},
            "cpu": {"enforced": "no", "by": f"{timeout}; while a call waits for approval the cell's clock runs on "
                                            "the CPU time of runsc's process tree"},
        }
    return {
        "memory": {"enforced": "per process", "by": f"{address_space}; the sandbox as a whole has no bound "
                                                    "(no cgroup without root)"},
        "pids": {"enforced": "whole sandbox", "by": f"{nproc}; no pids cgroup without root"},
        "cpu": {"enforced": "no", "by": f"{timeout}; while a call waits for approval the cell's clock runs on the "
                                        "CPU time of runsc's process tree (no cgroup without root)"},
    }


def check_rootless(require_hard_limits: bool, cgroup_parent: str | None = None,
                   cpus: float | None = None) -> cgroups.Delegation | None:
    """The delegated cgroup to use, if any; SandboxUnavailable, with cause and fix, when an ordinary user cannot get
    the sandbox configured."""
    if cpus is not None:  # a limit asked for and not enforced would be a silent fallback
        raise SandboxUnavailable(f"[sandbox] cpus = {cpus:g} needs a CPU quota on the sandbox's cgroup, which runsc "
                                 "sets only when cellgate runs as root (a delegated cgroup here binds memory and pids "
                                 "only); run cellgate as root, or unset [sandbox] cpus")
    problem = userns.probe()
    if problem is not None:
        raise SandboxUnavailable(f"gVisor without root needs a user namespace, which this host refuses "
                                 f"({problem}); {userns.FIX}")
    if not os.access(oci.UNSHARE, os.X_OK):
        raise SandboxUnavailable(f"{oci.UNSHARE} is missing: without root the kernel takes its sandbox uid "
                                 "through util-linux's unshare in gVisor; install util-linux, or run cellgate as root")
    delegation = cgroups.find(cgroup_parent)
    if require_hard_limits and delegation is None:
        raise SandboxUnavailable("[sandbox] require_hard_limits = true, but without root and without a delegated "
                                 "cgroup no cgroup binds the sandbox: memory is bounded per process only (RLIMIT_AS); "
                                 + HARD_LIMITS_FIX)
    return delegation
