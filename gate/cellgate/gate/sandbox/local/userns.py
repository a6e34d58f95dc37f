"""Starting runsc without root: a user and mount namespace of its own, holding the socket folder's tmpfs.

As root the host mounts a small tmpfs on each sandbox's socket folder
(``mounts``). An ordinary user cannot mount in the host's namespace, but can
in a user+mount namespace of their own (unprivileged user namespaces; gVisor's
``--rootless`` needs them anyway). So ``Sandbox`` starts, instead of runsc:

    python -I -S userns.py <socket folder> <bytes> <inodes> [--cgroup=<cgroup.procs>...] -- runsc --rootless ...

which first joins the sandbox's delegated cgroups where there are any
(``cgroups``: writing its own pid to each ``cgroup.procs``, so runsc and all
it starts are in them from the start), then enters a new user namespace (the user mapped to root in it: the only
mapping an unprivileged process may write) and mount namespace, mounts the
tmpfs there (same size, inode count, 0700 and nosuid/nodev/noexec as the
host's), and executes runsc in place: runsc finds itself root in a namespace
and does not re-execute. The mount is private to that namespace: the host
reaches the folder through ``/proc/<runsc pid>/root`` (``Sandbox.ipc_dir``)
and keeps a descriptor of it, so the kernel's output log can still be read
after the sandbox died. The tmpfs goes when the namespace and that descriptor
do. It runs as a script, like ``reaper``, so it starts in milliseconds.

``probe()`` runs the same steps on a scratch folder, to say early and
clearly when this host refuses them.

What stays as under root (SECURITY.md's flag table): ``--network=none``
(runsc refuses ``run --rootless`` with its own network stack rather than fall
back to the host's; ``tests/security/test_posture.py`` checks the namespaces
from the host), no ``--ignore-cgroups`` (rootless runsc ignores cgroup
*errors*, which ``enforcement`` reports), the gofer in an empty network
namespace. What differs: runsc's processes are the user's, not root's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
import tempfile
from functools import lru_cache

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 0x40000
FAILED = 125  # the exit code when the namespace or the mount could not be made (runsc never uses it)

FIX = ("enable unprivileged user namespaces (sysctl user.max_user_namespaces=15000, and on Debian "
       "kernel.unprivileged_userns_clone=1; on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor "
       "profile allowing userns for runsc and python), or run cellgate as root")


def join_cgroups(procs: list[str]) -> None:
    """Move this process into each of the sandbox's cgroups (before runsc exists, so all of it inherits them)."""
    for path in procs:
        with open(path, "w") as handle:
            handle.write(str(os.getpid()))


def enter(ipc: str, size: int, inodes: int) -> None:
    """Enter a new user+mount namespace (the caller mapped to root) and mount the socket folder's tmpfs."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), f"unshare(CLONE_NEWUSER|CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), f"making the mount namespace private: {os.strerror(ctypes.get_errno())}")
    options = f"size={size},nr_inodes={inodes},mode=0700,uid=0,gid=0".encode()
    if libc.mount(b"tmpfs", ipc.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) != 0:
        raise OSError(ctypes.get_errno(), f"mounting a tmpfs on {ipc}: {os.strerror(ctypes.get_errno())}")


@lru_cache(maxsize=1)
def probe() -> str | None:
    """None when this host lets this user make the namespace and mount; else what refused it."""
    with tempfile.TemporaryDirectory(prefix="cellgate-userns-") as folder:
        try:
            done = subprocess.run([sys.executable, "-I", "-S", __file__, "--probe", folder], capture_output=True,
                                  text=True, timeout=20, env={})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the user namespace probe did not run: {exc}"
    return None if done.returncode == 0 else (done.stderr.strip()[-300:] or f"exit code {done.returncode}")


def main(argv: list[str]) -> int:
    probing = argv[:1] == ["--probe"]
    if probing:
        ipc, size, inodes, command = argv[1], 1 << 20, 8, ["/bin/true"]
    else:
        split = argv.index("--")
        ipc, size, inodes, command = argv[0], int(argv[1]), int(argv[2]), argv[split + 1:]
        procs = [arg.removeprefix("--cgroup=") for arg in argv[3:split]]
        assert command and all(arg.startswith("--cgroup=") for arg in argv[3:split])
        try:
            join_cgroups(procs)
        except OSError as exc:
            print(f"cellgate: cannot join the sandbox's delegated cgroup {exc.filename}: {exc.strerror}; check that "
                  "the cgroup_parent an admin delegated is still this user's, or unset it", file=sys.stderr)
            return FAILED
    try:
        enter(ipc, size, inodes)
    except OSError as exc:
        print(exc.strerror if probing else f"cellgate: cannot start gVisor without root here: {exc.strerror}; {FIX}",
              file=sys.stderr)
        return FAILED
    os.execve(command[0], command, {})  # runsc gets no environment, as when the host starts it directly
    return FAILED  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
