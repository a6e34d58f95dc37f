"""Finding and deleting sandboxes whose host process is gone (however it went).

Each run folder holds an owner record (``OWNER_FILE``): the host process's
record (``liveness``: host, pid, start time), the runsc that runs the sandbox, the kernel's pid, and
without root the sandbox's delegated cgroups (``cgroups``), removed with it. A
folder whose owner is no longer alive is a leftover: its sandbox is killed and
deleted, its socket folder's tmpfs unmounted, the folder removed. Used by the
next start, the reaper and `cellgate doctor --clean`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from cellgate.gate._guarded import remove_tree_quietly
from cellgate.gate.sandbox import liveness
from cellgate.gate.sandbox.local import cgroups, mounts
from cellgate.gate.sandbox.runtime_dir import check_private

HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
OWNER_FILE = "owner.json"
ORPHAN_MOUNT_AGE = 120.0  # seconds: a run folder without an owner record this old was left by a crash


def delete_sandbox(runsc_path: str, state: str, sandbox_id: str) -> None:
    """Kill and delete a sandbox, and (as root) the cgroups runsc made for it; quiet if it is already gone."""
    # A sandbox started without root was started --rootless: its state is deleted the same way.
    flags = [f"--root={state}", *(["--rootless"] if os.geteuid() != 0 else [])]
    for argv in (
        [runsc_path, *flags, "kill", "--all", sandbox_id, "KILL"],
        [runsc_path, *flags, "delete", "--force", sandbox_id],
    ):
        try:
            subprocess.run(argv, capture_output=True, timeout=30, env={"PATH": HOST_PATH})
        except (OSError, subprocess.TimeoutExpired):
            pass
    cgroups.remove(cgroups.runsc_made(sandbox_id))


def reap_leftovers(root: Path) -> list[str]:
    """Delete the sandboxes under ``root`` whose owning host process is gone; returns their ids."""
    reaped: list[str] = []
    if not root.is_dir():
        return reaped
    check_private(root)  # its owner records name programs to run: only ever this user's own
    for folder in root.iterdir():
        owner_file = folder / OWNER_FILE
        try:
            owner = json.loads(owner_file.read_text())
        except (OSError, ValueError):
            # A host that died while preparing a sandbox leaves a mounted socket folder and no owner record.
            if mounts.mounts_under(folder) and _age(folder) > ORPHAN_MOUNT_AGE:
                mounts.unmount_under(folder)
                remove_tree_quietly(folder)
                reaped.append(folder.name)
            continue
        if not isinstance(owner, dict) or liveness.owner_alive(owner):
            continue
        if owner.get("runsc"):
            delete_sandbox(owner["runsc"], str(folder / "state"), folder.name)
        else:
            pid = owner.get("kernel_pid")
            if isinstance(pid, int) and liveness.owner_alive({"pid": pid, "start_time": owner.get("kernel_start_time")}):
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
        named = owner.get("cgroups")  # without root: the sandbox's delegated cgroups (only ever its own, by name)
        if isinstance(named, list):
            paths = [Path(p) for p in named if isinstance(p, str)]
            cgroups.remove([p for p in paths if cgroups.is_sandbox_cgroup(p, folder.name)])
        mounts.unmount_under(folder)  # the socket folder's tmpfs: never rmtree into a mount
        remove_tree_quietly(folder)
        reaped.append(folder.name)
    return reaped


def _age(folder: Path) -> float:
    try:
        return time.time() - folder.stat().st_mtime
    except OSError:
        return 0.0
