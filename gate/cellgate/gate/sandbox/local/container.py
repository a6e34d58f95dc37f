"""Running one kernel in gVisor: its run folder, the runsc process, its reaper.

Each sandbox gets a run folder under ``run_root()`` holding the OCI bundle,
the runsc state, a generated /etc, the kernel's connection file, the
generated tools package and the (empty, 0700) folder where the kernel binds
its ipc sockets: a small tmpfs the host mounts (``mounts``), unmounted with
the sandbox. Without root, runsc runs ``--rootless`` and that tmpfs is mounted
in runsc's own user+mount namespace instead (``userns``), the host reaching it
through ``ipc_dir``. A small reaper process beside the host process (one for all
its sandboxes, ``reaper``) deletes them if the host dies without doing so (even by
SIGKILL); anything a crash still leaves behind is reaped by the next start or
`cellgate doctor --clean`.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import cellgate.kernel
from cellgate.gate._errors import SandboxError
from cellgate.gate._guarded import Folder, remove_tree_quietly
from cellgate.gate.sandbox import liveness
from cellgate.gate.sandbox.checkpoints import Restore
from cellgate.gate.sandbox.environment import CHANNELS, NETWORK_ENV
from cellgate.gate.sandbox.images.store import Image, record_of
from cellgate.gate.sandbox.local import cgroups, enforcement, leftovers, mounts, oci, reaper, snapshot
from cellgate.gate.sandbox.local.leftovers import HOST_PATH, OWNER_FILE, delete_sandbox
from cellgate.gate.sandbox.local.runsc import Runsc
from cellgate.gate.sandbox.runtime_dir import private_dir
from cellgate.gate.sandbox.runtime_dir import run_root as run_root  # where callers have always found it
from cellgate.kernel import wire

Isolation = Literal["gvisor", "none"]


def kernel_python_path() -> str:
    """The folder that holds the ``cellgate/kernel`` package (mounted read-only)."""
    return str(Path(cellgate.kernel.__file__).resolve().parent.parent.parent)


def python_dirs() -> tuple[str, ...]:
    dirs = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), kernel_python_path()}
    return tuple(sorted(dirs))


def reap_leftovers(root: Path | None = None) -> list[str]:
    """Delete sandboxes whose owning host process is gone (under ``run_root()`` unless given); returns their ids."""
    return leftovers.reap_leftovers(root or run_root())


@dataclass(frozen=True)
class SandboxConfig:
    isolation: Isolation
    runsc: Runsc | None
    limits: oci.Limits
    reply_wait: float
    workspace: str | None = None
    restricted: tuple[str, ...] | None = None  # restricted mode's extra imports; None: off
    snapshot: bool = False  # gVisor only: restore from a snapshot image of a started kernel (see ``snapshot``)
    start_timeout: float = 60.0
    require_hard_limits: bool = False  # refuse to start where memory binds only per process (``enforcement``)
    cgroup_parent: str | None = None  # rootless: the delegated cgroup each sandbox gets a child of (``cgroups``)
    image: Image | None = None  # gVisor: the built image that is the sandbox's whole /; None: the host's (``host``)
    package_layer: str | None = None  # the session's installed packages (``%pip install``), bound read-only


class Sandbox:
    """One sandboxed kernel: create with ``start()``, end with ``delete()``."""

    def __init__(self, config: SandboxConfig, tools_files: Mapping[str, str], key: str,
                 snapshot_build: bool = False, restore: Restore | None = None) -> None:
        if config.isolation == "gvisor" and config.runsc is None:
            raise SandboxError("a gVisor sandbox needs runsc")
        self.config = config
        self.snapshot_build = snapshot_build  # started without a connection file, to be checkpointed
        self.restore = restore  # a live kernel's checkpoint this sandbox continues (``checkpoint``)
        self.image: Path | None = None  # the snapshot image it was restored from
        self.snapshot_problem: str | None = None  # why it was not, when it should have been
        self._spec_text = ""
        self.id = "cg-" + secrets.token_hex(6)
        self.root = run_root() / self.id
        self.key = key
        self._tools_files = dict(tools_files)
        self.process: subprocess.Popen[bytes] | None = None
        # Not root: runsc --rootless, the socket folder in a namespace of its own (``userns``).
        self.rootless = config.isolation == "gvisor" and os.geteuid() != 0
        self._ipc_fd: int | None = None  # rootless: the socket folder, once its tmpfs is mounted
        self._delegation: cgroups.Delegation | None = None  # rootless: the delegated cgroup, if any
        self.cgroup_procs: list[Path] = []  # rootless: the sandbox's own delegated cgroups, runsc joins them
        self.ports = {f"{c}_port": i + 1 for i, c in enumerate(CHANNELS)}

    # -- paths
    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    @property
    def ipc_dir(self) -> str:
        """The socket folder as the host reaches it (rootless: through its descriptor, see ``userns``)."""
        return f"/proc/self/fd/{self._ipc_fd}" if self._ipc_fd is not None else str(self.path("ipc"))

    def ipc_path(self, name: str) -> Path:
        return Path(self.ipc_dir, name)

    @property
    def ipc_prefix(self) -> str:
        return f"{self.ipc_dir}/k"

    def endpoint(self, channel: str) -> str:
        return f"ipc://{self.ipc_prefix}-{self.ports[channel + '_port']}"

    # -- lifecycle
    def _prepare(self) -> list[str]:
        if self.rootless:  # what the host lacks is the first thing said, before any folder is made
            self._delegation = enforcement.check_rootless(self.config.require_hard_limits, self.config.cgroup_parent,
                                                          self.config.limits.cpus)
        private_dir(run_root())
        self.root.mkdir(mode=0o700)
        for part in ("bundle/rootfs", "etc", "ipc", "conn", "tools", "state", "log"):
            self.path(*part.split("/")).mkdir(parents=True)
        uid, gid = oci.SANDBOX_UID, oci.SANDBOX_GID
        for name, text in oci.etc_files().items():
            self.path("etc", name).write_text(text)
        for relative, source in self._tools_files.items():
            target = self.path("tools", *relative.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source)
        connection = {
            **self.ports,
            "transport": "ipc",
            "ip": f"{oci.IPC_DIR}/k" if self.config.isolation == "gvisor" else self.ipc_prefix,
            "key": self.key,
            "signature_scheme": "hmac-sha256",
            "kernel_name": "cellgate",
        }
        if not self.snapshot_build:
            self.path("conn", "kernel.json").write_text(json.dumps(connection))
        image = self.config.image if self.config.isolation == "gvisor" else None
        kernel_argv = [
            image.python if image else sys.executable,
            "-m", "cellgate.kernel",
            "-f", oci.CONNECTION_FILE if self.config.isolation == "gvisor" else str(self.path("conn", "kernel.json")),
            "--HistoryManager.hist_file=:memory:",  # history in the kernel's memory: never a file, host or sandbox
            "--IPKernelApp.parent_handle=0",
        ]
        if self.config.isolation == "gvisor":
            if self.config.workspace:
                mounts.check_workspace(self.config.workspace, self.config.limits.workspace_bytes)
            if not self.rootless:
                # The socket folder is the one host folder the sandbox writes to: a small tmpfs, not the host's disk
                # (rootless: mounted in runsc's own namespace, see ``userns``).
                mounts.mount_tmpfs(self.path("ipc"), mounts.IPC_BYTES, uid, gid)
            # The sandbox user owns its own read-only folders (so a write there is EROFS, not EACCES) and the socket
            # folder, which holds nothing else. Rootless they are the user's, which the sandbox user is in gVisor.
            for part in () if self.rootless else ("bundle/rootfs", "etc", "tools", "ipc", "conn"):
                os.chown(self.path(*part.split("/")), uid, gid)
            if not self.snapshot_build:
                self.path("conn", "kernel.json").chmod(0o400)
                if not self.rootless:
                    os.chown(self.path("conn", "kernel.json"), uid, gid)
            for link, points_to in () if image else oci.rootfs_links().items():
                os.symlink(points_to, self.path("bundle", "rootfs", link))
            layout = oci.Layout(
                bundle=str(self.path("bundle")), etc=str(self.path("etc")), ipc=str(self.path("ipc")),
                conn=str(self.path("conn")), tools=str(self.path("tools")), python_dirs=() if image else python_dirs(),
                workspace=self.config.workspace, image_rootfs=str(image.rootfs) if image else None,
                packages=self.config.package_layer,
            )
            # An image has the kernel slice on its interpreter's own path; the host's is bound where it is.
            python_path = [*([] if image else [kernel_python_path()]),
                           *([oci.PACKAGES_DIR] if self.config.package_layer else [])]
            env = oci.environment(python_path, self.config.limits, self.config.reply_wait, self.config.restricted,
                                  image.preload if image else (),
                                  warm_completion=bool(image and image.warm_completion))
            spec = oci.spec(layout, self.config.limits, kernel_argv, env, sandbox_id=self.id, rootless=self.rootless)
            self._spec_text = json.dumps(spec, indent=1)
            self.path("bundle", "config.json").write_text(self._spec_text)
            assert self.config.runsc is not None
            argv = oci.runsc_argv(
                self.config.runsc.path, str(self.path("state")), self.config.runsc.platform,
                str(self.path("bundle")), self.id, image=self._restore_image() or self._snapshot_image(),
                rootless=self.rootless,
            )
            if self.rootless:
                if self._delegation is not None:
                    limits = self.config.limits
                    self.cgroup_procs = cgroups.create(self._delegation, self.id, limits.memory_bytes, limits.pids)
                argv = [sys.executable, "-I", "-S", str(Path(__file__).with_name("userns.py")), str(self.path("ipc")),
                        str(mounts.IPC_BYTES), str(mounts.IPC_INODES),
                        *(f"--cgroup={path}" for path in self.cgroup_procs), "--", *argv]
            return argv
        return kernel_argv

    # -- live checkpoints (``cellgate.kernel.hibernate``: the kernel let go of its sockets first)
    def configuration_key(self) -> str:
        """What a sandbox must share with this one to restore its checkpoint (its whole spec but for its paths)."""
        assert self.config.runsc is not None
        return snapshot.image_key(self._spec_text, str(self.root), self.config.runsc)

    def _restore_image(self) -> str | None:
        if self.restore is None:
            return None
        if self.rootless:
            raise SandboxError(f"this checkpoint cannot be resumed here: {enforcement.NO_RESTORE_ROOTLESS}")
        if self.configuration_key() != self.restore.key:
            raise SandboxError("the checkpoint was made by a sandbox of another configuration (its limits, image, "
                               "environment, runsc or the kernel's code differ from this session's); resume it with "
                               "the settings and cellgate it was made with")
        self._put_resume_marker("restored")  # the kernel goes on as soon as it is restored
        return self.restore.image

    def checkpoint(self, image: Path, leave_running: bool, timeout: float) -> str:
        """Save this sandbox once its kernel says it let go of its sockets; returns its configuration key. If it
        fails, the kernel is told to take its sockets up again and the sandbox goes on as it was."""
        assert self.config.runsc is not None
        if self.rootless:
            raise SandboxError(f"a sandbox cannot be checkpointed without root here: {enforcement.NO_RESTORE_ROOTLESS}")
        try:
            self._wait_paused(timeout)
            done = subprocess.run(
                oci.checkpoint_argv(self.config.runsc.path, str(self.path("state")), self.id, str(image),
                                    leave_running=leave_running),
                capture_output=True, text=True, timeout=max(timeout, 600), env={"PATH": HOST_PATH})
        except subprocess.TimeoutExpired:
            self._resume_after_failure()
            raise SandboxError("runsc checkpoint did not finish in time") from None
        except BaseException:
            self._resume_after_failure()
            raise
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if line.strip()), "")
            self._resume_after_failure()
            # gVisor ends a sandbox whose save failed (e.g. "Cannot save endpoint with bound host socket").
            gone = "; the sandbox stopped with it: its kernel is gone, restart the session" if self.poll() is not None \
                else ""
            raise SandboxError(f"runsc checkpoint failed ({done.returncode}): {first[:300]}{gone}")
        if leave_running:
            self._resume_in_place()
        return self.configuration_key()

    def _wait_paused(self, timeout: float) -> None:
        self._wait_for_marker(wire.PAUSED_MARKER, timeout, "let go of its sockets for the checkpoint")

    def _socket_folder(self) -> Folder:
        """The socket folder, which the sandbox writes: every name in it is touched through this (``_guarded``)."""
        if self._ipc_fd is not None:
            return Folder(os.dup(self._ipc_fd), str(self.path("ipc")))
        return Folder.open(self.path("ipc"))

    def _wait_for_marker(self, name: str, timeout: float, what: str) -> None:
        """Wait until the kernel puts file ``name`` into its socket folder; SandboxError saying it did not ``what``.
        Only a regular file counts: a link, FIFO or folder a cell planted there is not the kernel's marker."""
        deadline = time.monotonic() + timeout
        with self._socket_folder() as folder:
            while not folder.has_file(name):
                if self.poll() is not None or time.monotonic() > deadline:
                    raise SandboxError(f"the kernel did not {what} within {timeout:g} s: {self.log_tail(500)}")
                time.sleep(0.005)  # polling the socket folder for the kernel's marker

    def _resume_after_failure(self) -> None:
        try:
            self._resume_in_place()
        except SandboxError:
            pass  # the checkpoint's own failure is the one said; the relay finds the kernel gone if it is

    def _resume_in_place(self, timeout: float = 30.0) -> None:
        """Tell this sandbox's paused kernel to take up its sockets again (a fork's parent, a failed checkpoint) and
        wait until it has: the host's relay then connects anew (``Relay.reconnect_kernel``)."""
        if self.poll() is not None:
            return
        try:
            with self._socket_folder() as folder:
                folder.remove(wire.RESUMED_MARKER)
            self._put_resume_marker(wire.RESUME_IN_PLACE)
            self._wait_for_marker(wire.RESUMED_MARKER, timeout, "take up its sockets again after the checkpoint")
            with self._socket_folder() as folder:
                folder.remove(wire.RESUMED_MARKER)
        except OSError as exc:
            raise SandboxError(f"the kernel's socket folder could not be used to resume it: {exc}") from None
        # The sockets the relay connects to anew get the checks of the first connect (a cell could have put
        # anything at their names while the kernel had let go of them).
        self.wait_for_sockets(timeout, first=False)

    def _put_resume_marker(self, how: str) -> None:
        """Whole or absent: the kernel reads it the moment it appears. Written through the folder's descriptor as
        a new file, whatever a cell left at either name removed first (it is never followed)."""
        partial = f".{wire.RESUME_MARKER}"
        try:
            with self._socket_folder() as folder:
                folder.remove(partial)
                folder.remove(wire.RESUME_MARKER)
                folder.write_new(partial, (how + "\n").encode(), mode=0o644, owner=(oci.SANDBOX_UID, oci.SANDBOX_GID))
                folder.rename(partial, wire.RESUME_MARKER)
        except OSError as exc:
            raise SandboxError(f"the kernel could not be told to resume (its socket folder: {exc})") from None

    # -- snapshots
    def _snapshot_image(self) -> str | None:
        """The image to restore from, built first if this configuration has none; None: start cold."""
        if not self.config.snapshot or self.snapshot_build or self.config.runsc is None:
            return None
        if self.rootless:
            self.snapshot_problem = enforcement.NO_RESTORE_ROOTLESS
            return None
        try:
            key = snapshot.image_key(self._spec_text, str(self.root), self.config.runsc)
            self.image = snapshot.ensure_image(run_root() / "images", key, self._build_image)
        except (SandboxError, OSError) as exc:
            self.snapshot_problem = str(exc)[:500]
            return None
        return str(self.image)

    def _build_image(self, target: Path) -> None:
        """Start a sandbox of this configuration without a connection file and checkpoint it once ready."""
        assert self.config.runsc is not None
        build = Sandbox(self.config, {}, "", snapshot_build=True)
        try:
            build.start()
            build._wait_for_marker(oci.SNAPSHOT_READY, self.config.start_timeout, "get ready for a snapshot image")
            done = subprocess.run(
                oci.checkpoint_argv(self.config.runsc.path, str(build.path("state")), build.id, str(target)),
                capture_output=True, text=True, timeout=self.config.start_timeout, env={"PATH": HOST_PATH})
            if done.returncode != 0:
                raise SandboxError(f"runsc checkpoint failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        except subprocess.TimeoutExpired:
            raise SandboxError("runsc checkpoint did not finish in time") from None
        finally:
            build.delete()

    def discard_image(self) -> None:
        """The image did not restore: drop it, so the next start builds a fresh one."""
        if self.image is not None:
            snapshot.discard(self.image.parent, self.image.name)

    def start(self) -> None:
        argv = self._prepare()
        os.chmod(self.path("ipc"), 0o700)
        log = open(self.path("log", "sandbox.log"), "wb")
        if self.config.isolation == "gvisor":
            env: dict[str, str] = {}  # runsc gets no environment at all, the host's least of all
            cwd = str(self.root)
        else:
            env = dict(oci.parse_env(oci.environment([kernel_python_path()], self.config.limits, self.config.reply_wait,
                                  self.config.restricted)))
            env["PYTHONPATH"] = os.pathsep.join([str(self.path("tools")), kernel_python_path(),
                                                 *([self.config.package_layer] if self.config.package_layer else [])])
            env["HOME"] = env["TMPDIR"] = env["JUPYTER_RUNTIME_DIR"] = str(self.path("log"))
            env["IPYTHONDIR"] = env["MPLCONFIGDIR"] = env["XDG_CACHE_HOME"] = str(self.path("log"))
            env[wire.ENV_OUTPUT_LOG] = str(self.path("ipc", oci.OUTPUT_LOG))
            for name in NETWORK_ENV:  # not sandboxed: no tunnel on the host's own loopback, no gate for its network
                env.pop(name, None)
            cwd = str(self.path("log"))
        self.process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        owner = {
            **liveness.this_process(),
            "runsc": self.config.runsc.path if self.config.isolation == "gvisor" and self.config.runsc else None,
            "kernel_pid": self.process.pid, "kernel_start_time": liveness.start_time(self.process.pid),
            "cgroups": [str(path.parent) for path in self.cgroup_procs],
        }
        self.path(OWNER_FILE).write_text(json.dumps(owner))
        reaper.watch(self.root.parent, HOST_PATH)

    def wait_for_sockets(self, timeout: float, first: bool = True) -> None:
        """Wait until the kernel has bound every socket, checking each path with lstat. ``first``: the kernel's
        first start, when the folder holds nothing else (later, after an in-place resume, a cell may have left
        files of its own there)."""
        deadline = time.monotonic() + timeout
        # Rootless the gofer binds the sockets as the user (the sandbox uid in gVisor, see ``oci.rootless_argv``).
        expected_uid = oci.SANDBOX_UID if self.config.isolation == "gvisor" and not self.rootless else os.geteuid()
        pending = set(CHANNELS)
        wrong_owner: dict[str, int] = {}
        # Each socket's name, and every name the folder may hold: found once, not on each poll (a hundred
        # concurrent starts polled on the gate's one interpreter).
        names = {c: os.path.basename(self.endpoint(c).removeprefix("ipc://")) for c in CHANNELS}
        allowed = {*names.values(), oci.OUTPUT_LOG, wire.PAUSED_MARKER, wire.RESUME_MARKER, wire.RESUMED_MARKER}
        while pending:
            folder_ready = not self.rootless or self._open_ipc()
            folder = self.ipc_dir
            listed = set(os.listdir(folder))
            for channel in sorted(pending) if folder_ready else ():
                if names[channel] not in listed:
                    continue
                path = os.path.join(folder, names[channel])
                try:
                    info = os.lstat(path)
                except FileNotFoundError:
                    continue
                if not stat.S_ISSOCK(info.st_mode):
                    self.delete()
                    raise SandboxError(
                        f"the kernel's {channel} endpoint {path} is not a socket (mode {oct(info.st_mode)}); "
                        "refusing to connect"
                    )
                if info.st_uid != expected_uid:
                    # gVisor's gofer creates the socket file, then hands it to the sandbox
                    # user: a moment of root ownership is expected; anything longer is not.
                    wrong_owner[channel] = info.st_uid
                    continue
                wrong_owner.pop(channel, None)
                pending.discard(channel)
            unexpected = listed - allowed if first else set()
            if unexpected:
                self.delete()
                raise SandboxError(f"unexpected files in the socket folder: {sorted(unexpected)[:5]}; refusing to connect")
            if not pending:
                return
            if self.process is not None and self.process.poll() is not None:
                raise SandboxError(
                    f"the sandboxed kernel exited with code {self.process.returncode} before it was ready: "
                    f"{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.delete()
                if wrong_owner:
                    raise SandboxError(f"the kernel's sockets {sorted(wrong_owner)} are not owned by uid "
                                       f"{expected_uid} (owners {sorted(set(wrong_owner.values()))}); refusing to connect")
                raise SandboxError(f"the sandboxed kernel was not ready within {timeout:g} s: {self.log_tail()}")
            time.sleep(0.02)  # polling the file system for the kernel's sockets

    def _open_ipc(self) -> bool:
        """Rootless: hold the socket folder once runsc's namespace has its tmpfs (a mount: another device)."""
        if self._ipc_fd is None and self.process is not None:
            try:
                fd = os.open(f"/proc/{self.process.pid}/root{self.path('ipc')}", os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                return False
            info = os.fstat(fd)
            if info.st_dev == os.stat(self.path("ipc")).st_dev:
                os.close(fd)  # not mounted yet
                return False
            if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
                os.close(fd)
                self.delete()
                raise SandboxError(f"the sandbox's socket folder is not this user's 0700 tmpfs (owner {info.st_uid}, "
                                   f"mode {oct(info.st_mode)}); refusing to connect")
            self._ipc_fd = fd
        return self._ipc_fd is not None

    @property
    def memory_cgroup(self) -> Path | None:
        """Rootless: the sandbox's delegated memory cgroup, where ``oom`` reads its deaths (root: runsc's)."""
        return cgroups.memory_dir(self.cgroup_procs)

    def log_tail(self, limit: int = 1500) -> str:
        try:
            return self.path("log", "sandbox.log").read_text(errors="replace")[-limit:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        """Stop the kernel now (the run folder stays until ``delete``)."""
        if self.config.isolation == "gvisor" and self.config.runsc is not None:
            delete_sandbox(self.config.runsc.path, str(self.path("state")), self.id)
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    def delete(self) -> None:
        """Kill the kernel and remove the run folder."""
        self.kill()
        if self._ipc_fd is not None:
            os.close(self._ipc_fd)  # its tmpfs goes with runsc's namespace
            self._ipc_fd = None
        # runsc's own too (as root), looked for again now its process is gone: a start cut short may have made
        # them after kill's delete_sandbox looked.
        cgroups.remove([path.parent for path in self.cgroup_procs] + cgroups.runsc_made(self.id))
        mounts.unmount_under(self.root)
        remove_tree_quietly(self.root)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"isolation": self.config.isolation, "id": self.id}
        if self.config.runsc is not None and self.config.isolation == "gvisor":
            info.update(self.config.runsc.describe())
        limits = self.config.limits
        info["limits"] = {
            "memory_bytes": limits.memory_bytes, "pids": limits.pids, "open_files": limits.open_files,
            "tmp_bytes": limits.tmp_bytes, "address_space_bytes": limits.address_space_bytes, "cpus": limits.cpus,
        }
        info["network"] = "none"
        if self.config.isolation == "gvisor":
            info["image"] = record_of(self.config.image)
            info["rootless"] = self.rootless
            info["limits_enforced"] = enforcement.report(self.rootless, cgroup_parent=self.config.cgroup_parent,
                                                         cpus=limits.cpus)
            if self.restore is not None:
                info["start"] = {"checkpoint": self.restore.key}
            else:
                info["start"] = ({"snapshot": self.image.name} if self.image
                                 else {"cold": self.snapshot_problem or "snapshots off"})
        return info
