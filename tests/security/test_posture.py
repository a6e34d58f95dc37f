"""Host-side posture of a running sandbox (SECURITY.md P2), modelled on gVisor's sandboxposture test."""

from __future__ import annotations

import os
from pathlib import Path


def processes(sandbox_id: str) -> dict[str, int]:
    """pid of the runsc-sandbox and runsc-gofer processes of one sandbox."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if sandbox_id.encode() in b" ".join(argv) and argv[0] in (b"runsc-sandbox", b"runsc-gofer"):
            found[argv[0].decode()] = int(pid)
    return found


def status(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)


def check(pid: int, name: str) -> None:
    fields = status(pid)
    assert fields["Seccomp"].strip() == "2", (name, fields["Seccomp"])  # seccomp filter mode
    assert fields["NoNewPrivs"].strip() == "1", name
    assert Path(f"/proc/{pid}/environ").read_bytes() == b"", f"{name} has a host environment"
    root, host_root = os.stat(f"/proc/{pid}/root/"), os.stat("/")
    assert (root.st_dev, root.st_ino) != (host_root.st_dev, host_root.st_ino), f"{name} sees the host's root"
    # runsc puts the Sentry in new mount, ipc, uts, net and user namespaces; it stays in
    # the host's pid namespace by design (the sandbox's processes live in the Sentry's
    # own pid table, which test_host_processes_are_invisible checks from inside).
    namespaces = ("mnt", "ipc", "uts", "net", "user") + (("pid",) if name == "runsc-gofer" else ())
    for ns in namespaces:
        assert os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), f"{name} shares {ns}"


def test_sandbox_and_gofer_posture_before_and_after_threads(session_factory) -> None:
    box = session_factory()
    sandbox_id = box.session.provisioner.handle.id
    found = processes(sandbox_id)
    assert set(found) == {"runsc-sandbox", "runsc-gofer"}, found
    for name, pid in found.items():
        check(pid, name)
    result = box.execute(
        "import threading\nev = threading.Event()\nts = [threading.Thread(target=ev.wait) for _ in range(50)]\n"
        "[t.start() for t in ts]\nprint(threading.active_count() >= 50)")
    assert result.stdout == "True\n"
    for name, pid in processes(sandbox_id).items():
        check(pid, name)
        for task in os.listdir(f"/proc/{pid}/task"):  # every host thread shares the same restrictions
            fields = dict(line.split(":\t", 1) for line in
                          Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines() if ":\t" in line)
            assert fields["Seccomp"].strip() == "2" and fields["NoNewPrivs"].strip() == "1"
    box.execute("ev.set()")


def test_host_processes_are_invisible(session_factory) -> None:
    """SECURITY.md P5: only sandbox pids are visible; the gate's host pid is unreachable."""
    box = session_factory()
    result = box.execute(f"""
import os
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
try:
    os.kill({os.getpid()}, 0)
    reach = 'reachable'
except ProcessLookupError:
    reach = 'ESRCH'
except PermissionError:
    reach = 'EPERM'
print(len(pids) < 10, reach)
""")
    assert result.stdout == "True ESRCH\n", result.text
