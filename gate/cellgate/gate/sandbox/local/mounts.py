"""Host folders the sandbox can write to are size-limited filesystems, never plain host directories.

The kernel's socket folder (``/run/cellgate/ipc`` inside) must be a host
directory: the host connects to the sockets the kernel binds there, and the
host reads the kernel's output log there (``cellgate.kernel.outlog``). The
sandbox user can write anything into it, so the host mounts a small tmpfs on
it before the sandbox starts (``IPC_BYTES``, ``IPC_INODES``, mode 0700, owned
by the sandbox user, nosuid/nodev/noexec) and unmounts it on every way out:
``Sandbox.delete``, the reaper, ``reap_leftovers`` (the next start and
``cellgate doctor --clean``). A write past it fails in the cell with
``ENOSPC``; it costs the host at most ``IPC_BYTES`` of memory per sandbox.

A host folder given as ``workspace`` must likewise be bounded: the sandbox is
started only if the filesystem holding it has at most ``workspace_mb`` free
(its own tmpfs, a loop device or a quota'd volume: the operator's choice).

Mounting in the host's namespace needs root; without root the same tmpfs is
mounted in a user+mount namespace of runsc's own (``userns``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from cellgate.gate._errors import SandboxError

IPC_BYTES = 4 << 20  # five sockets and the output log (which starts over at 1 MiB)
IPC_INODES = 64
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MNT_DETACH = 2

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_tmpfs(path: Path, size: int, uid: int, gid: int, inodes: int = IPC_INODES) -> None:
    """Mount a tmpfs of ``size`` bytes on ``path`` (an empty folder), mode 0700, owned by ``uid``."""
    if os.geteuid() != 0:
        raise SandboxError(f"the sandbox's socket folder {path} must be a size-limited tmpfs, and mounting one on "
                           "the host needs root (without root, the sandbox mounts it in a namespace of its own)")
    options = f"size={size},nr_inodes={inodes},mode=0700,uid={uid},gid={gid}".encode()
    if _libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) != 0:
        error = ctypes.get_errno()
        raise SandboxError(f"could not mount a {size >> 20} MB tmpfs on the sandbox's socket folder {path}: "
                           f"{os.strerror(error)}; cellgate does not start a sandbox with an unbounded host folder")


def unmount(path: Path) -> None:
    """Detach whatever is mounted on ``path``; quiet when nothing is."""
    _libc.umount2(str(path).encode(), MNT_DETACH)


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root``, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root).rstrip("/")
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        point = fields[4].encode().decode("unicode_escape")  # octal escapes such as \040
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_under(root: Path) -> list[Path]:
    """Unmount everything at or below ``root``; returns what was mounted."""
    points = mounts_under(root)
    for point in points:
        unmount(point)
    return points


def check_workspace(folder: str, limit: int) -> None:
    """Refuse a host workspace folder on a filesystem with more than ``limit`` bytes free."""
    try:
        info = os.statvfs(folder)
    except OSError as exc:
        raise SandboxError(f"[sandbox] workspace = {folder!r} cannot be used: {exc.strerror}") from None
    free = info.f_bavail * info.f_frsize
    if free > limit:
        raise SandboxError(
            f"[sandbox] workspace = {folder!r} is on a filesystem with {free >> 20} MB free, more than "
            f"workspace_mb = {limit >> 20}: a cell could fill it. Put the folder on its own bounded filesystem "
            f"(e.g. `mount -t tmpfs -o size={limit >> 20}m tmpfs {folder}`, a loop device or a quota'd volume), "
            "or raise workspace_mb")
