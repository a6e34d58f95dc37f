"""An ordinary user gets the sandbox root gets: gVisor --rootless, no network, the same uid, bounded folders.

Run as root and as an unprivileged user (CI runs both). Each test asserts what must hold either way and, where
the two differ, what this host's user gets (``ROOTLESS``): the uid and folders the kernel sees, the socket
folder's bounds (a tmpfs the host mounts as root, one in runsc's own namespace without root), which limits
bind and how (``enforcement``), and the clear error where something is missing.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cellgate, local_sandbox

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.local import cgroups, enforcement, mounts, oci, userns

ROOTLESS = os.geteuid() != 0
DELEGATED = enforcement.delegated(None)  # an ordinary user's delegated cgroup ($CELLGATE_CGROUP_PARENT, CI's user leg)
LAYOUT = oci.Layout(bundle="/r/b", etc="/r/etc", ipc="/r/ipc", conn="/r/conn", tools="/r/tools",
                    python_dirs=("/opt/py",))


def test_rootless_is_only_the_hosts_choice_and_keeps_network_none() -> None:
    root = oci.runsc_argv("/x/runsc", "/r/state", "systrap", "/r/b", "cg-1")
    rootless = oci.runsc_argv("/x/runsc", "/r/state", "systrap", "/r/b", "cg-1", rootless=True)
    assert rootless == [root[0], "--rootless", *root[1:]]  # that one flag, nothing else
    assert "--network=none" in rootless and "--host-uds=create" in rootless
    forbidden = [a for a in rootless for bad in oci.FORBIDDEN_FLAG_PREFIXES if a.startswith(bad)]
    assert forbidden == ["--rootless"]  # still refused from anyone but the host
    with pytest.raises(ValueError, match="cannot restore"):
        oci.runsc_argv("/x/runsc", "/r/state", "systrap", "/r/b", "cg-1", image="/i", rootless=True)


def test_the_rootless_spec_differs_only_in_how_the_kernel_becomes_the_sandbox_uid() -> None:
    env = oci.environment(["/opt/k"], oci.Limits(), 3600)
    argv = ["python", "-m", "cellgate.kernel"]
    root = oci.spec(LAYOUT, oci.Limits(), argv, env, sandbox_id="cg-1")
    rootless = oci.spec(LAYOUT, oci.Limits(), argv, env, sandbox_id="cg-1", rootless=True)
    assert rootless["process"].pop("args") == [oci.UNSHARE, "--user", f"--map-user={oci.SANDBOX_UID}",
                                               f"--map-group={oci.SANDBOX_GID}", "--", *argv]
    assert rootless["process"].pop("user") == {"uid": 0, "gid": 0}
    del root["process"]["args"], root["process"]["user"]
    # /workspace's tmpfs belongs to gVisor's uid 0, which is the sandbox uid in the kernel's user namespace.
    (workspace,) = [m for m in rootless["mounts"] if m["destination"] == oci.WORKSPACE]
    assert f"uid={oci.SANDBOX_UID}" not in workspace["options"] and "uid=0" in workspace["options"]
    workspace["options"] = next(m for m in root["mounts"] if m["destination"] == oci.WORKSPACE)["options"]
    assert rootless == root  # mounts, rlimits, namespaces (network included), no capabilities, noNewPrivileges


def test_a_refused_user_namespace_is_a_clear_error(tmp_path: Path) -> None:
    # The helper's own failure path, on a folder it cannot mount on (a file): its message names cause and fix.
    target = tmp_path / "not-a-folder"
    target.write_text("")
    done = subprocess.run([sys.executable, "-I", "-S", userns.__file__, str(target), "4096", "8", "--", "/bin/true"],
                          capture_output=True, text=True, env={})
    assert done.returncode == userns.FAILED
    assert "cannot start gVisor without root here" in done.stderr and "user namespaces" in done.stderr
    assert "Traceback" not in done.stderr
    assert userns.probe() is None  # this host allows them (root, or an ordinary user with userns enabled)


def test_a_host_refusing_user_namespaces_gets_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    # An ordinary user (uid 4242) in a user namespace that may have no more below it: as on a host with them off.
    (tmp_path / "cell.py").write_text("print(1)\n")
    inner = f"unshare --user --map-user=4242 --map-group=4242 -- {sys.executable} -m cellgate.gate"
    env = {**os.environ, "CELLGATE_RUN_ROOT": str(tmp_path / "run"), "CELLGATE_APPROVALS_DIR": str(tmp_path / "ap")}
    done = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c",
                           f"echo 1 > /proc/sys/user/max_user_namespaces && exec {inner} exec cell.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stderr
    assert "gVisor without root needs a user namespace, which this host refuses" in done.stderr, done.stderr
    assert "enable unprivileged user namespaces" in done.stderr and "Traceback" not in done.stderr


def test_hard_limits_demanded_where_none_can_be_had_is_a_clear_error(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cgroups.ENV_PARENT, raising=False)  # no delegated cgroup: none can be had here
    if (cgroups.ROOT / "cgroup.controllers").is_file() and enforcement.delegated(None) is not None:
        pytest.skip("this user has a cgroup v2 subtree delegated by systemd: hard limits can be had")
    with pytest.raises(SandboxUnavailable, match="require_hard_limits = true") as caught:
        enforcement.check_rootless(require_hard_limits=True)
    assert "run cellgate as root" in str(caught.value) and "delegate a cgroup" in str(caught.value)
    assert enforcement.check_rootless(require_hard_limits=False) is None  # what an ordinary user gets by default
    if ROOTLESS:  # through the command line: one line naming cause and fix, no traceback
        (tmp_path / "cellgate.toml").write_text("[sandbox]\nrequire_hard_limits = true\n")
        (tmp_path / "cell.py").write_text("print(1)\n")
        done = cellgate("exec", "cell.py", cwd=tmp_path)
        assert done.returncode != 0 and "require_hard_limits = true" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def shared(session_factory):
    return session_factory()


def test_the_kernel_is_the_sandbox_uid_with_its_folders_and_no_network(shared) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    code = f"""
import errno, json, os, socket
def write(path):
    try:
        open(path, 'w')
    except OSError as e:
        return errno.errorcode[e.errno]
def reach(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=2)
        return 'connected'
    except OSError as e:
        return type(e).__name__
print(json.dumps({{"uid": [os.getuid(), os.geteuid(), os.getgid()], "groups": os.getgroups(),
    "owners": [os.stat(p).st_uid for p in ('/run/cellgate/ipc', '/opt/cellgate/tools', '/etc')],
    "writes": [write(p) for p in ('/opt/cellgate/tools/x', '/etc/x', '/run/cellgate/conn/x', '/usr/x')],
    "nets": sorted(name for _, name in socket.if_nameindex()), "host": reach({port})}}))
"""
    try:
        result = shared.execute(code)
    finally:
        listener.close()
    assert result.ok, result.error
    seen = json.loads(result.stdout)
    assert seen["uid"] == [oci.SANDBOX_UID, oci.SANDBOX_UID, oci.SANDBOX_GID] and seen["groups"] == []
    assert seen["owners"] == [oci.SANDBOX_UID] * 3  # its own folders, as under root
    assert seen["writes"][:3] == ["EROFS"] * 3 and seen["writes"][3] in ("EROFS", "EACCES")
    assert seen["nets"] == ["lo"] and seen["host"] == "ConnectionRefusedError"  # its own loopback only
    info = local_sandbox(shared.session).describe()
    assert info["network"] == "none" and info["rootless"] is ROOTLESS
    assert info["limits_enforced"] == enforcement.report(ROOTLESS)
    assert shared.session.sandbox_info["limits_enforced"] == enforcement.report(ROOTLESS)  # the notebook's metadata
    if ROOTLESS:
        assert info["start"] == {"cold": enforcement.NO_RESTORE_ROOTLESS}


def test_limits_bind_as_reported(shared) -> None:
    report = enforcement.report(ROOTLESS)
    sandbox = local_sandbox(shared.session)
    cgroup = Path("/sys/fs/cgroup/memory/cellgate", sandbox.id)
    if ROOTLESS and DELEGATED is None:
        assert report["memory"]["enforced"] == "per process" and not cgroup.exists()
    elif ROOTLESS:
        assert report["memory"]["enforced"] == "whole sandbox" and "delegated cgroup" in report["memory"]["by"]
    elif enforcement.cgroup_version() == "v1":
        assert report["memory"]["enforced"] == "whole sandbox"
        assert int((cgroup / "memory.limit_in_bytes").read_text()) == 1 << 30
    # pids: tasks stop at the limit either way (RLIMIT_NPROC, enforced by gVisor; as root a pids cgroup too).
    result = shared.execute("""
import threading
stop, made = threading.Event(), []
try:
    while len(made) < 10000:
        made.append(threading.Thread(target=stop.wait))
        made[-1].start()
except RuntimeError as e:
    made.pop()
    failed = str(e)
stop.set()
[t.join() for t in made]
print(len(made), '|', failed)
""")
    assert result.ok, (result.error, result.stdout)
    made, failed = result.stdout.strip().split(" | ")
    assert 0 < int(made) < 256 and "can't start new thread" in failed, result.stdout
    # cpu: what the cell's clock runs on while a call waits for approval sees the sandbox compute
    # (its cgroup as root; runsc's process tree without root), never nothing.
    source = shared.session.provisioner.service.kernel.cpu_source()
    before = source.seconds()
    assert before is not None
    # Pure computation, no system call: about 1 s of CPU on this machine however busy its cores are.
    assert shared.execute("x = 0\nfor i in range(7_000_000):\n    x += i").ok
    assert source.seconds() - before >= 0.3
    # memory: one process past its address-space cap gets a MemoryError, and the kernel lives on.
    result = shared.execute("try:\n    big = bytearray(2 << 30)\nexcept MemoryError:\n    print('MemoryError')")
    assert result.stdout == "MemoryError\n"


def test_the_socket_folder_is_a_bounded_tmpfs_that_outlives_the_sandbox_for_its_output_log(session_factory) -> None:
    box = session_factory()
    sandbox = local_sandbox(box.session)
    info = os.statvfs(sandbox.ipc_dir)
    assert info.f_blocks * info.f_frsize == mounts.IPC_BYTES and info.f_files == mounts.IPC_INODES
    if ROOTLESS:  # the tmpfs is in runsc's namespace: the host's own folder stays empty on the host's disk
        assert sandbox.ipc_dir.startswith("/proc/self/fd/") and os.listdir(sandbox.path("ipc")) == []
    result = box.execute("""
print('before the end', flush=True)
try:
    with open('/run/cellgate/ipc/fill', 'wb') as f:
        while True:
            f.write(bytes(1 << 20))
            f.flush()
except OSError as e:
    print(e.errno)
import os
os.remove('/run/cellgate/ipc/fill')
""")
    assert result.stdout.endswith(f"{errno.ENOSPC}\n"), result.stdout
    sandbox.kill()  # runsc and its namespace are gone; the host still reads what the kernel logged
    assert b"before the end" in sandbox.ipc_path(oci.OUTPUT_LOG).read_bytes()


@pytest.mark.ordinary_user
def test_a_delegated_cgroup_that_is_not_the_users_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="does not exist") as caught:
        enforcement.check_rootless(require_hard_limits=False, cgroup_parent="cellgate-nobody-delegated-this")
    assert "cellgate-nobody-delegated-this" in str(caught.value) and "an admin delegates it" in str(caught.value)
    (tmp_path / "cell.py").write_text("print(1)\n")  # through the command line: the same, no traceback
    done = cellgate("exec", "cell.py", cwd=tmp_path, env={cgroups.ENV_PARENT: "cellgate-nobody-delegated-this"})
    assert done.returncode != 0 and "cellgate-nobody-delegated-this" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.ordinary_user
def test_a_delegated_cgroup_holds_the_whole_sandbox_with_its_limits_and_goes_with_it(session_factory) -> None:
    if DELEGATED is None:
        pytest.skip("no cgroup is delegated to this user (CI's user leg has one: scripts/test-as-user)")
    box = session_factory(memory_mb=512, pids=200)
    sandbox = local_sandbox(box.session)
    children = [path.parent for path in sandbox.cgroup_procs]
    assert children == list(DELEGATED.child(sandbox.id).values())
    pids: set[int] = set()
    for child in children:
        pids |= {int(pid) for pid in (child / "cgroup.procs").read_text().split()}
        for limit in ("memory.limit_in_bytes", "memory.max"):
            if (child / limit).exists():
                assert int((child / limit).read_text()) == 512 << 20
        if (child / "pids.max").exists():
            assert (child / "pids.max").read_text().strip() == "200"
    names = {Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode() for pid in pids}
    assert sandbox.process.pid in pids and {"runsc-sandbox", "runsc-gofer"} <= names, names  # all of runsc
    assert box.session.sandbox_info["limits_enforced"]["memory"]["enforced"] == "whole sandbox"
    box.close()
    assert not any(child.exists() for child in children)


@pytest.mark.ordinary_user
def test_a_leftover_sandboxs_delegated_cgroup_is_reaped_and_only_its_own(tmp_path: Path) -> None:
    if DELEGATED is None:
        pytest.skip("no cgroup is delegated to this user (CI's user leg has one: scripts/test-as-user)")
    from cellgate.gate.sandbox.local import leftovers

    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    mine, other = "cg-00000000dead", "cg-00000000a11e"
    made = [p.parent for p in cgroups.create(DELEGATED, mine, 256 << 20, 128)]
    kept = [p.parent for p in cgroups.create(DELEGATED, other, 256 << 20, 128)]
    try:
        (root / mine).mkdir()  # its host is gone (no such pid); its record names its own cgroups and another's
        (root / mine / leftovers.OWNER_FILE).write_text(json.dumps(
            {"pid": 1 << 30, "start_time": "0", "runsc": None, "cgroups": [str(p) for p in made + kept]}))
        assert leftovers.reap_leftovers(root) == [mine]
        assert not any(p.exists() for p in made) and all(p.is_dir() for p in kept)
    finally:
        cgroups.remove(made + kept)


def test_a_checkpoint_is_what_root_gets_and_a_clear_error_without_it(shared, tmp_path: Path) -> None:
    """Pause, resume and fork need runsc's restore, which it cannot do --rootless (docs/live-sessions.md)."""
    from cellgate.gate import SessionError

    assert shared.session.can_checkpoint is not ROOTLESS
    if not ROOTLESS:
        return  # root's checkpoints: tests/sandbox/test_live_sessions.py
    with pytest.raises(SessionError, match="cannot be checkpointed: its sandbox backend") as refused:
        shared._run(shared.session.checkpoint(tmp_path / "never"))
    assert "as root" in str(refused.value) and not (tmp_path / "never").exists()
    assert shared.execute("print('still here')").stdout == "still here\n"  # the session goes on
