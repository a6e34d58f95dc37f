"""A delegated cgroup that binds each sandbox as a whole when cellgate runs without root.

As root runsc makes each sandbox's cgroup itself. An ordinary user gets one
only where the system delegates a cgroup subtree to them:

- cgroup v1 (hybrid hosts, as the CI machine): an admin makes, in each of the
  ``memory`` and ``pids`` hierarchies, a folder under the user's own cgroup
  path (``/proc/self/cgroup``) and chowns it (and its ``cgroup.procs`` and
  ``tasks``) to the user, then names it in ``[sandbox] cgroup_parent`` or
  ``CELLGATE_CGROUP_PARENT`` (relative: under the user's own cgroup path;
  absolute: from each controller's mount).
- cgroup v2 (unified hosts): the configured parent, or else the nearest
  ancestor of the user's own cgroup that the user owns and whose
  ``cgroup.subtree_control`` gives its children ``memory`` and ``pids`` (as
  systemd's user delegation does).

Each sandbox gets a child named by its id, with the memory limit (swap
included where the host accounts it) and the pids limit; ``userns`` moves
runsc into it before it starts, so the sandbox, the gofer and the kernel all
inherit it. Nothing is ever written outside the delegated parent.

As root, ``runsc_made`` names the cgroups runsc made itself for a sandbox
(under ``/cellgate``), so that ``remove`` can take away what runsc left.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.local.cpu_weight import PARENT as RUNSC_PARENT

ROOT = Path("/sys/fs/cgroup")
ENV_PARENT = "CELLGATE_CGROUP_PARENT"
V1_CONTROLLERS = ("memory", "pids")
FIX = ("an admin delegates it: makes the folder in each of the memory and pids hierarchies under the user's own "
       "cgroup and chowns it, its cgroup.procs and tasks to the user (README: What an ordinary user gets); or unset "
       f"[sandbox] cgroup_parent and {ENV_PARENT} to run with per-process limits")


@dataclass(frozen=True)
class Delegation:
    """Where this user may make each sandbox's cgroup: per v1 controller, or the one v2 folder ('unified')."""

    version: Literal["v1", "v2"]
    parents: tuple[tuple[str, Path], ...]

    def describe(self) -> str:
        if self.version == "v2":
            return f"delegated cgroup v2 {self.parents[0][1]}"
        return "delegated cgroup v1 " + ", ".join(str(path) for _, path in self.parents)

    def where(self, controller: str) -> str:
        """The delegated parent that holds ``controller``'s limit, as the report names it."""
        parents = dict(self.parents)
        return f"delegated cgroup {self.version} {parents.get(controller, parents.get('unified'))}"

    def child(self, sandbox_id: str) -> dict[str, Path]:
        return {name: parent / sandbox_id for name, parent in self.parents}


def own_path(controller: str | None) -> str | None:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (None: the v2 one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller is not None and controller in names.split(",")):
            return path
    return None


def _under(base: Path, own: str | None, parent: str) -> Path:
    return base / parent.lstrip("/") if parent.startswith("/") or own is None else base / own.lstrip("/") / parent


def _check_owned(path: Path, what: str) -> None:
    try:
        info = path.stat()
    except OSError:
        raise SandboxUnavailable(f"the delegated cgroup {path} ({what}) does not exist; {FIX}") from None
    if info.st_uid != os.geteuid() or not os.access(path, os.W_OK):
        raise SandboxUnavailable(f"the delegated cgroup {path} ({what}) is owned by uid {info.st_uid}, not this user "
                                 f"(uid {os.geteuid()}), or is not writable; {FIX}")


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def configured_parent(setting: str | None) -> str | None:
    return setting or os.environ.get(ENV_PARENT) or None


def find(setting: str | None = None) -> Delegation | None:
    """The delegated cgroup to use, or None; raises SandboxUnavailable when a configured one is not usable."""
    if os.geteuid() == 0:
        return None  # root: runsc makes each sandbox's cgroup
    parent = configured_parent(setting)
    if (ROOT / "cgroup.controllers").is_file():
        return _find_v2(parent)
    if parent is None:
        return None
    if ".." in Path(parent).parts:
        raise SandboxUnavailable(f"cgroup_parent {parent!r} must not contain '..'; {FIX}")
    parents = []
    for name in V1_CONTROLLERS:
        if not (ROOT / name).is_dir():
            raise SandboxUnavailable(f"cgroup_parent {parent!r}: this host has no cgroup v1 {name} hierarchy at "
                                     f"{ROOT / name}; {FIX}")
        path = _under(ROOT / name, own_path(name), parent)
        _check_owned(path, f"cgroup_parent {parent!r}, {name} controller")
        parents.append((name, path))
    return Delegation("v1", tuple(parents))


def _find_v2(parent: str | None) -> Delegation | None:
    own = own_path(None)
    if parent is not None:
        path = _under(ROOT, own, parent)
        _check_owned(path, f"cgroup_parent {parent!r}")
        missing = {"memory", "pids"} - _words(path / "cgroup.subtree_control")
        if missing:
            raise SandboxUnavailable(f"the delegated cgroup {path} does not enable {sorted(missing)} for its "
                                     f"children (cgroup.subtree_control); {FIX}")
        return Delegation("v2", (("unified", path),))
    if own is None:
        return None
    path = ROOT / own.lstrip("/")
    while path != ROOT:  # the nearest of the user's own ancestors that hands memory and pids to its children
        try:
            owned = path.stat().st_uid == os.geteuid() and os.access(path, os.W_OK)
        except OSError:
            return None
        if not owned:
            return None
        if {"memory", "pids"} <= _words(path / "cgroup.subtree_control"):
            return Delegation("v2", (("unified", path),))
        path = path.parent
    return None


def create(delegation: Delegation, sandbox_id: str, memory_bytes: int, pids: int) -> list[Path]:
    """Make the sandbox's child cgroup(s) with its limits; returns the ``cgroup.procs`` files to join."""
    made = delegation.child(sandbox_id)
    try:
        for name, path in made.items():
            path.mkdir(mode=0o755)
            if name in ("memory", "unified"):
                v1 = name == "memory"
                (path / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(memory_bytes))
                swap = path / ("memory.memsw.limit_in_bytes" if v1 else "memory.swap.max")
                if swap.exists():  # swap is accounted here: the sandbox may not swap past its limit
                    swap.write_text(str(memory_bytes) if v1 else "0")
            if name in ("pids", "unified"):
                (path / "pids.max").write_text(str(pids))
    except OSError as exc:
        remove(list(made.values()))
        raise SandboxUnavailable(f"cannot make the sandbox's cgroup in {delegation.describe()}: {exc}; {FIX}") from None
    return [path / "cgroup.procs" for path in made.values()]


def remove(paths: list[Path], wait: float = 10.0) -> None:
    """Kill what is left in the sandbox's cgroups and remove them (quiet if gone)."""
    deadline = time.monotonic() + wait
    for path in paths:
        while path.is_dir():
            for pid in _words(path / "cgroup.procs"):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            try:
                path.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)  # the killed processes leave the cgroup as they exit


SANDBOX_ID = re.compile(r"cg-[0-9a-f]{12}")  # ``Sandbox.id``: a name that can only ever be one path component


def runsc_made(sandbox_id: str, root: Path = ROOT) -> list[Path]:
    """As root: the cgroups runsc made for a sandbox, ``/cellgate/<id>`` in each hierarchy there is (v1 has one per
    controller, v2 one). ``runsc delete`` leaves them behind when the sandbox it is handed never finished starting
    (its state not yet written); ``leftovers.delete_sandbox`` removes what is left."""
    if os.geteuid() != 0 or not SANDBOX_ID.fullmatch(sandbox_id) or not root.is_dir():
        return []
    hierarchies = [root, *(path for path in root.iterdir() if path.is_dir() and not path.is_symlink())]
    return [made for base in hierarchies if (made := base / RUNSC_PARENT / sandbox_id).is_dir()]


def memory_dir(procs: list[Path]) -> Path | None:
    """The sandbox's memory cgroup among its ``cgroup.procs`` files (for ``oom``)."""
    for path in procs:
        if (path.parent / "memory.oom_control").exists() or (path.parent / "memory.events").exists():
            return path.parent
    return None


def is_sandbox_cgroup(path: Path, sandbox_id: str) -> bool:
    """A path an owner record names is one this user's sandbox made (for ``leftovers``)."""
    return path.name == sandbox_id and path.is_relative_to(ROOT) and ".." not in path.parts and path.is_dir()
