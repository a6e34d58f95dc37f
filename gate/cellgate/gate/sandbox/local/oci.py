"""The OCI bundle and the runsc command line, built by pure functions.

Everything that decides how the sandbox is launched lives here, so a unit test
can pin it (SECURITY.md P3): gVisor puts the OCI spec and its own flags
outside its CVE scope, so this file *is* our security boundary's
configuration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Final

from cellgate.gate.sandbox.environment import CONNECTION_FILE as CONNECTION_FILE
from cellgate.gate.sandbox.environment import ENV_ALLOWLIST as ENV_ALLOWLIST
from cellgate.gate.sandbox.environment import IPC_DIR as IPC_DIR
from cellgate.gate.sandbox.environment import OUTPUT_LOG as OUTPUT_LOG
from cellgate.gate.sandbox.environment import PACKAGES_DIR as PACKAGES_DIR
from cellgate.gate.sandbox.environment import SNAPSHOT_READY as SNAPSHOT_READY
from cellgate.gate.sandbox.environment import TOOLS_DIR as TOOLS_DIR
from cellgate.gate.sandbox.environment import WORKSPACE as WORKSPACE
from cellgate.gate.sandbox.environment import kernel_environment
from cellgate.gate.sandbox.limits import SandboxLimits
from cellgate.gate.sandbox.local.cpu_weight import PARENT as CGROUP_PARENT

SANDBOX_UID: Final = 1000
SANDBOX_GID: Final = 1000
# Paths inside the sandbox, the kernel's environment and the limits are the seam's (any backend's kernel has them).
Limits = SandboxLimits

# Host system directories the interpreter needs, bound read-only when present.
SYSTEM_DIRS: Final = ("/usr", "/lib", "/lib64", "/bin", "/sbin")

@dataclass(frozen=True)
class Layout:
    """Host paths that make up one sandbox's bundle."""

    bundle: str  # holds config.json and rootfs/
    etc: str  # generated passwd, group, hosts
    ipc: str  # empty, 0700, owned by the sandbox uid: the kernel binds its sockets here
    conn: str  # the kernel's connection file (read-only inside)
    tools: str  # the generated tools package (read-only inside)
    python_dirs: tuple[str, ...]  # interpreter prefixes and package dirs (read-only)
    workspace: str | None = None  # a host folder bound read-write, or None for a tmpfs
    image_rootfs: str | None = None  # a built image's root (``sandbox.images``): the whole /; None: the host's /usr
    packages: str | None = None  # the session's package layer (``%pip install``), bound read-only; None: none


    @property
    def rootfs(self) -> str:
        return self.image_rootfs or os.path.join(self.bundle, "rootfs")


def _bind(source: str, destination: str, *, writable: bool = False) -> dict[str, Any]:
    options = ["rbind", "nosuid", "nodev", "rw" if writable else "ro"]
    return {"destination": destination, "type": "bind", "source": source, "options": options}


def _tmpfs(destination: str, size: int, mode: str = "1777", owner: int | None = None) -> dict[str, Any]:
    options = ["nosuid", "nodev", f"size={size}", f"mode={mode}"]
    if owner is not None:
        options += [f"uid={owner}", f"gid={owner}"]
    return {"destination": destination, "type": "tmpfs", "source": "tmpfs", "options": options}


def rootfs_links() -> dict[str, str]:
    """Symlinks to recreate in the empty rootfs, for merged-/usr hosts (/lib -> usr/lib)."""
    return {
        directory.lstrip("/"): os.readlink(directory)
        for directory in SYSTEM_DIRS
        if os.path.islink(directory)
    }


def mounts(layout: Layout, limits: Limits, rootless: bool = False) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        _tmpfs("/tmp", limits.tmp_bytes),
        _tmpfs("/dev/shm", 64 << 20),
    ]
    bound = set()
    for directory in () if layout.image_rootfs else SYSTEM_DIRS:  # an image is the whole /: nothing of the host's
        if os.path.isdir(directory) and not os.path.islink(directory):
            result.append(_bind(directory, directory))
            bound.add(directory)
    for directory in layout.python_dirs:
        if not any(directory == b or directory.startswith(b + "/") for b in bound):
            result.append(_bind(directory, directory))
            bound.add(directory)
    result += [
        _bind(layout.etc, "/etc"),
        _bind(layout.conn, os.path.dirname(CONNECTION_FILE)),
        _bind(layout.tools, TOOLS_DIR),
        _bind(layout.ipc, IPC_DIR, writable=True),
    ]
    if layout.packages:
        result.append(_bind(layout.packages, PACKAGES_DIR))
    if layout.workspace:
        result.append(_bind(layout.workspace, WORKSPACE, writable=True))
    else:
        # Rootless the kernel is gVisor's uid 0, SANDBOX_UID only in its own user namespace (``rootless_argv``).
        result.append(_tmpfs(WORKSPACE, limits.workspace_bytes, mode="0700", owner=0 if rootless else SANDBOX_UID))
    return result


def environment(python_path: list[str], limits: Limits, reply_wait: float,
                restricted: tuple[str, ...] | None = None, preload: tuple[str, ...] = (),
                warm_completion: bool = False) -> list[str]:
    """The sandbox's whole environment (``environment.kernel_environment``) as the OCI spec lists it."""
    env = kernel_environment(limits, reply_wait, restricted, python_path, preload=preload,
                             warm_completion=warm_completion)
    return [f"{k}={v}" for k, v in sorted(env.items())]


# Rootless, gVisor's gofer can give a file only to the one host user mapped in its namespace (the user, root
# there): the kernel binds its sockets as uid 0 of the sandbox, within a user namespace of its own in gVisor
# where it is SANDBOX_UID, so it runs, and sees its folders owned, as that uid as under root.
UNSHARE: Final = "/usr/bin/unshare"


def rootless_argv(argv: list[str]) -> list[str]:
    """The sandbox's command without root: ``argv`` as SANDBOX_UID in a user namespace inside gVisor."""
    return [UNSHARE, "--user", f"--map-user={SANDBOX_UID}", f"--map-group={SANDBOX_GID}", "--", *argv]


def spec(
    layout: Layout,
    limits: Limits,
    argv: list[str],
    env: list[str],
    sandbox_id: str,
    hostname: str = "cellgate",
    rootless: bool = False,
) -> dict[str, Any]:
    """The OCI runtime spec (config.json) of one sandboxed kernel (``rootless``: started by an ordinary user)."""
    rlimits = [
        {"type": "RLIMIT_NOFILE", "hard": limits.open_files, "soft": limits.open_files},
        {"type": "RLIMIT_NPROC", "hard": limits.pids, "soft": limits.pids},
        {"type": "RLIMIT_CORE", "hard": 0, "soft": 0},
        {"type": "RLIMIT_FSIZE", "hard": limits.workspace_bytes, "soft": limits.workspace_bytes},
    ]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0} if rootless else {"uid": SANDBOX_UID, "gid": SANDBOX_GID},
            "args": rootless_argv(argv) if rootless else argv,
            "env": env,
            "cwd": WORKSPACE,
            "capabilities": {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")},
            "rlimits": rlimits,
            "noNewPrivileges": True,
        },
        "root": {"path": layout.image_rootfs or "rootfs", "readonly": True},
        "hostname": hostname,
        "mounts": mounts(layout, limits, rootless),
        "linux": {
            # Without a cgroups path runsc creates no cgroup and the limits below
            # would not be enforced.
            "cgroupsPath": f"/{CGROUP_PARENT}/{sandbox_id}",  # as root: runsc makes it (``cpu_weight``)
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "resources": {
                "memory": {"limit": limits.memory_bytes},
                "pids": {"limit": limits.pids},
                **({"cpu": cpu_quota(limits.cpus)} if limits.cpus else {}),
            },
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"],
        },
    }


CPU_PERIOD_US: Final = 100_000  # the CFS period of a sandbox's CPU quota (the kernel's default)


def cpu_quota(cpus: float) -> dict[str, int]:
    """OCI ``linux.resources.cpu`` for ``cpus`` CPUs: that many periods' worth of CPU time in each period (runsc
    writes it to the sandbox's cgroup: v1 ``cpu.cfs_quota_us``, v2 ``cpu.max``)."""
    return {"quota": max(1000, round(cpus * CPU_PERIOD_US)), "period": CPU_PERIOD_US}


# Flags that must never appear (SECURITY.md, A1 and P3); ``--rootless`` only as the host's own choice.
FORBIDDEN_FLAG_PREFIXES: Final = (
    "--network=host",
    "--net-raw",
    "--TESTONLY",
    "--profile",
    "--iouring",
    "--allow-suid",
    "--debug",
    "--strace",
    "--overlay2=none",
    "--ignore-cgroups",
    "--host-uds=all",
    "--host-uds=open",
    "--rootless",
)


def runsc_argv(runsc: str, state_root: str, platform: str, bundle: str, sandbox_id: str,
               image: str | None = None, rootless: bool = False) -> list[str]:
    """The exact runsc command that runs one sandbox in the foreground (restored from ``image`` if given).

    ``rootless``: the host is not root. gVisor has no sandbox network then; ``--network=none`` stays (runsc
    refuses ``run`` rootless with any other than none or host), and it cannot restore.
    """
    if rootless and image is not None:
        raise ValueError("runsc cannot restore a snapshot image --rootless")
    command = ["run"] if image is None else ["restore", f"--image-path={image}"]
    return [
        runsc,
        *(["--rootless"] if rootless else []),
        f"--root={state_root}",
        "--network=none",
        "--host-uds=create",
        f"--platform={platform}",
        *command,
        f"--bundle={bundle}",
        sandbox_id,
    ]


def checkpoint_argv(runsc: str, state_root: str, sandbox_id: str, image: str,
                    leave_running: bool = False) -> list[str]:
    """Save a sandbox's state as an image; the sandbox stops (or, ``leave_running``, goes on).

    Uncompressed: a restore from a compressed image keeps ~50 MB more of host memory per sandbox.
    """
    return [runsc, f"--root={state_root}", "checkpoint", "--compression=none",
            *(["--leave-running"] if leave_running else []), f"--image-path={image}", sandbox_id]


# Fontconfig's smallest whole configuration: the host's fonts under the bound /usr, its cache on the sandbox's /tmp.
FONTS_CONF: Final = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>/usr/share/fonts</dir>
  <dir>/usr/local/share/fonts</dir>
  <cachedir>/tmp/cache/fontconfig</cachedir>
</fontconfig>
"""


def etc_files(uid: int = SANDBOX_UID, gid: int = SANDBOX_GID) -> dict[str, str]:
    """The small generated /etc: never the host's."""
    return {
        "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:cellgate sandbox:{WORKSPACE}:/usr/sbin/nologin\n",
        "group": f"root:x:0:\nsandbox:x:{gid}:\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
        "fonts.conf": FONTS_CONF,
    }




def parse_env(env: list[str]) -> list[tuple[str, str]]:
    return [tuple(item.split("=", 1)) for item in env]  # type: ignore[misc]
