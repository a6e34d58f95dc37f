"""Another local user can neither read nor pre-create a user's runtime state (tests/security/README.md, "Other
local users").

Root runs two uids that have no account (none is needed): the owner, whose cellgate code makes its run folder
(the kernel's connection file and the socket folder where the kernel binds its sockets), the approval queue with
a request in it, a journal and the launcher's restart state; and a stranger, who tries to list, read and connect
to each. With fresh state the stranger then creates each place first, as a folder of its own or a link, and
the owner's code must refuse it, naming it and its owner, and put nothing there. The owner's run root is the
fallback for a user without $XDG_RUNTIME_DIR, in the shared /tmp.

Both run Debian's /usr/bin/python3 (the venv's interpreter may live where other users cannot run it) on a copy
of cellgate's host code and the pure-Python libraries these modules import, readable by them. The socket is one
the owner binds where the kernel binds its shell socket: the folders around it are what is under test.
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

PYTHON = "/usr/bin/python3"
LIBRARIES = ("rich", "jupyter_core", "platformdirs")  # imported by approval_queue and launcher_state

pytestmark = pytest.mark.root_only("acting as two other users")

OWNER = r'''
import json, os, socket, sys
from pathlib import Path
from cellgate.gate.audit.journal import Journal
from cellgate.gate.calls.approval_queue import QueueApprover, write_json_atomically
from cellgate.gate.sandbox.local import oci
from cellgate.gate.sandbox.local.container import Sandbox, SandboxConfig
from cellgate.gate.sandbox.runtime_dir import run_root
from cellgate.gate.session import launcher_state

mode, project = sys.argv[1], Path(sys.argv[2])
config = SandboxConfig(isolation="none", runsc=None, limits=oci.Limits(), reply_wait=5.0)
attempts = {
    "run folder": lambda: Sandbox(config, {"tools/__init__.py": ""}, key="k" * 64),
    "approvals": QueueApprover,
    "journal": lambda: Journal(project / "run.journal.jsonl"),
    "launch state": lambda: launcher_state.save(launcher_state.state_path(project / "kernel-1.json"),
                                                launcher_state.LaunchState(str(project / "kernel-1.json"),
                                                                           str(project / "run.ipynb"), None)),
}
if mode == "refused":  # every place was created first by someone else
    outcomes = {}
    for name, attempt in attempts.items():
        try:
            made = attempt()
            if isinstance(made, Sandbox):
                made._prepare()
            outcomes[name] = "used"
        except Exception as exc:
            outcomes[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(outcomes), flush=True)
    sys.exit()

box = attempts["run folder"]()
box._prepare()
approver = attempts["approvals"]()
write_json_atomically(approver.folder / "s-1.request.json", {"id": "s-1", "tool": "refund", "args": {"amount": 1}})
journal = attempts["journal"]()
journal.append("session-started", sync=True)
attempts["launch state"]()
shell = box.endpoint("shell").removeprefix("ipc://")
server = socket.socket(socket.AF_UNIX)
server.bind(shell)
server.listen()
socket.socket(socket.AF_UNIX).connect(shell)  # the control: the owner reaches it
print(json.dumps({
    "run root": ["list", str(run_root())],
    "run folder": ["list", str(box.root)],
    "connection file": ["read", str(box.path("conn", "kernel.json"))],
    "shell socket": ["connect", shell],
    "approvals": ["list", str(approver.folder)],
    "approval request": ["read", str(approver.folder / "s-1.request.json")],
    "journal": ["read", str(journal.path)],
    "launch state": ["read", str(launcher_state.state_path(project / "kernel-1.json"))],
    "control: a public file of the project": ["read", str(project / "README")],
}), flush=True)
sys.stdin.read()  # keeps the socket listening until the test is done
'''

STRANGER_PROBES = r'''
import json, os, socket, sys
outcomes = {}
for name, (how, path) in json.loads(sys.argv[1]).items():
    try:
        if how == "list":
            os.listdir(path)
        elif how == "read":
            open(path, "rb").read(1)
        else:
            socket.socket(socket.AF_UNIX).connect(path)
        outcomes[name] = "ok"
    except OSError as exc:
        outcomes[name] = type(exc).__name__
print(json.dumps(outcomes))
'''

STRANGER_PLANTS = r'''
import json, os, sys
for kind, path in json.loads(sys.argv[1]):
    if kind == "folder":
        os.makedirs(path)
        os.chmod(path, 0o777)
    elif kind == "link":
        os.symlink(sys.argv[2], path)
    else:
        with open(path, "w") as planted:
            pass
        os.chmod(path, 0o666)
'''


@pytest.fixture(scope="module")
def people() -> Iterator[tuple[int, int, Path]]:
    """(owner uid, stranger uid, a folder both can read) with the code both run; their state is removed after."""
    # No account needed; above the ranges of real and systemd's dynamic users, apart from other runs here.
    owner = 2_000_000 + 2 * secrets.randbelow(500_000)
    tmp_mode = stat.S_IMODE(os.stat("/tmp").st_mode)
    assert tmp_mode == 0o1777, (f"/tmp has mode {tmp_mode:o}, not 1777 as Debian makes it: these tests plant in it "
                                "as another user would; run `chmod 1777 /tmp`")
    stranger = owner + 1
    base = Path(tempfile.mkdtemp(prefix="cellgate-users-"))
    try:
        base.chmod(0o755)
        lib = base / "lib"
        for side in ("gate", "kernel"):
            shutil.copytree(ROOT / side / "cellgate", lib / "cellgate", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        for name in LIBRARIES:
            source = Path(importlib.import_module(name).__file__ or "").parent
            shutil.copytree(source, lib / name, ignore=shutil.ignore_patterns("__pycache__"))
        yield owner, stranger, base
    finally:
        shutil.rmtree(base, ignore_errors=True)
        remove(Path(f"/tmp/cellgate-{owner}"))


def remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    shutil.rmtree(path, ignore_errors=True)


def folder_of(uid: int, path: Path, mode: int) -> Path:
    path.mkdir(parents=True)
    os.chown(path, uid, uid)
    path.chmod(mode)
    return path


def as_user(uid: int, base: Path, *argv: str, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """Run ``python3 ARGV`` as ``uid`` (its own group, no others) with the copied code and a bare environment."""
    home = base / f"home-{uid}"
    if not home.exists():
        folder_of(uid, home, 0o700)
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": str(base / "lib"),
                   "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    return subprocess.Popen([PYTHON, "-c", *argv], user=uid, group=uid, extra_groups=[], env=environment,
                            cwd=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def finish(process: subprocess.Popen[str], stdin: str | None = None) -> dict[str, str]:
    out, err = process.communicate(stdin, timeout=60)
    assert process.returncode == 0, err[-2000:]
    return json.loads(out.splitlines()[-1])


def test_another_user_can_read_nothing_of_a_users_run_folder_journal_approvals_or_sockets(people) -> None:
    owner, stranger, base = people
    shared = folder_of(0, base / "read", 0o1777)  # like /tmp
    project = folder_of(owner, shared / "project", 0o755)  # a project folder, readable by everyone
    (project / "README").write_text("public\n")
    (project / "README").chmod(0o644)
    env = {"JUPYTER_RUNTIME_DIR": str(shared / f"jupyter-{owner}")}
    running = as_user(owner, base, OWNER, "read", str(project), env=env, stdin=subprocess.PIPE)
    assert running.stdout is not None
    line = running.stdout.readline()
    try:
        probes = json.loads(line)
        assert probes["run root"][1] == f"/tmp/cellgate-{owner}/cellgate"  # the shared /tmp fallback
        outcomes = finish(as_user(stranger, base, STRANGER_PROBES, json.dumps(probes)))
    finally:
        finish_error = running.communicate("", timeout=60)[1]
    assert running.returncode == 0, finish_error[-2000:]
    assert outcomes.pop("control: a public file of the project") == "ok"
    assert outcomes == dict.fromkeys(outcomes, "PermissionError") and len(outcomes) == 8, outcomes


@pytest.mark.parametrize("plant", ["folder", "link"])
def test_another_user_cannot_pre_create_a_users_run_folder_journal_approvals_or_launch_state(people, plant) -> None:
    owner, stranger, base = people
    shared = folder_of(0, base / f"plant-{plant}", 0o1777)
    project = shared / "project"  # the stranger may create anything in a shared folder, so everything is planted
    run_root = Path(f"/tmp/cellgate-{owner}")
    remove(run_root)
    planted = {"run folder": run_root, "approvals": shared / "approvals", "launch state": shared / "jupyter"}
    theirs = folder_of(stranger, shared / "theirs", 0o777)
    plants = [[plant, str(path)] for path in planted.values()]
    finish_plants = as_user(stranger, base, STRANGER_PLANTS + "print('{}')", json.dumps(
        [["folder", str(project)], *plants, ["file", str(project / "run.journal.jsonl")]]), str(theirs))
    finish(finish_plants)
    env = {"CELLGATE_APPROVALS_DIR": str(planted["approvals"] / "queue"),
           "JUPYTER_RUNTIME_DIR": str(planted["launch state"] / "runtime")}
    outcomes = finish(as_user(owner, base, OWNER, "refused", str(project), env=env))
    try:
        for name, path in {**planted, "journal": project / "run.journal.jsonl"}.items():
            said = outcomes[name]
            assert said.startswith(("ConfigError", "JournalError", "UntrustedState")), (name, said)
            assert str(path) in said and f"uid {stranger}" in said or plant == "link" and "symbolic link" in said, \
                (name, said)
        assert os.listdir(theirs) == [], "the owner's code put something in the stranger's folder"
        assert (project / "run.journal.jsonl").stat().st_size == 0
    finally:
        remove(run_root)
