"""The host against a hostile kernel, over the life of cells and kernels (SECURITY.md section 12: B3, B6-B9).

Each case does the attack from a real gVisor sandbox and asserts the outcome
on the host: what the tool did (a file it appends to), what the approval
queue and `cellgate approvals` say, the journal, the notebook, the host's
memory; then that the session (or a fresh one) still works.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from conftest import cellgate as run_cellgate
from conftest import local_sandbox

from cellgate.gate.sandbox.local import mounts

# CPU or wall time counts here: never beside another such test (tests/conftest.py, the xdist groups).
pytestmark = pytest.mark.xdist_group("cpu")

TOOLS = '''
"""Tools whose effects the test can see: each run appends a line to a file beside this module."""

import os
import time
from pathlib import Path

LOG = Path(__file__).with_name("refunds.log")


def refund(amount: int = 5000) -> str:
    """Refund an order.

    Args:
        amount: In cents.
    """
    with LOG.open("a") as log:
        log.write(f"{amount}\\n")
    return f"refunded {amount}"


def echo(text: str) -> str:
    """Return text unchanged."""
    return text


def await_request(seconds: float = 60) -> list[str]:
    """Wait on the host until the approval queue holds a request; the ids it holds.

    Args:
        seconds: The bound.
    """
    queue = Path(os.environ["CELLGATE_APPROVALS_DIR"])
    deadline = time.monotonic() + seconds
    while not (pending := sorted(queue.glob("*.request.json"))):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no approval request appeared in {queue} within {seconds} s")
        time.sleep(0.05)  # polling the queue folder the gate writes to
    return [path.name.removesuffix(".request.json") for path in pending]
'''

POLICY = '''
[tools]
modules = ["lifecycle_tools.py"]

[policy]
default = "allow"
approver = "queue"
approval_timeout = 600

[policy.tools.refund]
decision = "approve"

[[policy.tools.refund.rules]]
name = "small refunds are routine"
when = { properties = { amount = { maximum = 100 } } }
decision = "allow"
'''


def project(tmp_path_factory: pytest.TempPathFactory, extra: str = "") -> Path:
    folder = tmp_path_factory.mktemp("lifecycle")
    (folder / "lifecycle_tools.py").write_text(TOOLS)
    (folder / "cellgate.toml").write_text(POLICY + extra)
    return folder


def refunds(folder: Path) -> list[str]:
    log = folder / "refunds.log"
    return log.read_text().split() if log.exists() else []


def cellgate(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI; its stdout and stderr with rich's line wrapping undone."""
    done = run_cellgate(*args, env=env)
    done.stdout, done.stderr = " ".join(done.stdout.split()), " ".join(done.stderr.split())
    return done


def wait_for(condition, what: str, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling state another process writes


def one_request(folder: Path) -> str:
    paths = wait_for(lambda: sorted(folder.glob("*.request.json")), "an approval request")
    assert len(paths) == 1, [p.name for p in paths]
    return paths[0].name.removesuffix(".request.json")


def journal(box) -> list[dict]:
    path = Path(box.session.notebook_path).with_suffix(".journal.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mounted(text: str) -> list[str]:
    """Mount points on this host whose path contains ``text``."""
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines() if text in line]


def mem_available_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def submit(box, code: str):
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(box.execute, code)
    pool.shutdown(wait=False)
    return future


def assert_withdrawn(box, folder: Path, approvals: Path, request_id: str, status: str) -> None:
    """Gone from the queue and the list at once, approving it is a clear error, the tool never ran."""
    assert not (approvals / f"{request_id}.request.json").exists()
    assert request_id not in cellgate("approvals", "list").stdout
    done = cellgate("approvals", "approve", request_id)
    assert done.returncode != 0
    assert f"approval {request_id!r} was withdrawn" in done.stderr and f"its cell ended ({status})" in done.stderr
    assert "the tool was not run and will not run" in done.stderr
    events = [r for r in journal(box) if r["event"] == "approval-withdrawn" and r["request"] == request_id]
    assert len(events) == 1 and events[0]["tool"] == "refund" and events[0]["reason"] == f"its cell ended ({status})"
    assert not list(approvals.glob(f"{request_id}.answer.json"))
    assert refunds(folder) == []


# ---------------------------------------------------------------- B6
def test_B6_a_pending_approval_dies_with_its_cell_however_the_cell_ends(session_factory, tmp_path_factory,
                                                                         approvals: Path) -> None:
    folder = project(tmp_path_factory)
    box = session_factory(config=folder / "cellgate.toml", tools=[], cell_timeout=6.0, interrupt_grace=3.0)

    # Interrupted while the main thread waits for the approval.
    pending = submit(box, "tools.refund(4000)")
    request_id = one_request(approvals)
    box._run(box.session.interrupt())
    result = pending.result(60)
    assert result.status == "interrupted"
    assert_withdrawn(box, folder, approvals, request_id, "interrupted")
    (call,) = nbformat.read(box.session.notebook_path, as_version=4).cells[-1].metadata.cellgate.calls
    assert call["decision"] == "approval-withdrawn" and call["ok"] is False and call["approval"]["answered"] is None

    # The cell ends normally while a thread it started waits for approval: the cell ends once the host's queue
    # holds the thread's request (a tool that waits for it on the host and returns its id), not after a guess at
    # how long that takes. The request lives only until the cell ends, so its id comes from the cell's output.
    pending = submit(box, "import threading\nthreading.Thread(target=lambda: tools.refund(4200)).start()\n"
                          "print(*tools.await_request())")
    result = pending.result(60)
    assert result.status == "ok"
    (request_id,) = result.stdout.split()  # the cell ended with the request pending
    assert_withdrawn(box, folder, approvals, request_id, "ok")

    # Timeout: the main thread waits for approval past cell_timeout, with no person answering.
    pending = submit(box, "import threading\nthreading.Thread(target=lambda: tools.refund(4300)).start()\n"
                          "while True:\n    pass")
    request_id = one_request(approvals)
    result = pending.result(120)
    assert result.status in ("timeout", "killed")
    assert_withdrawn(box, folder, approvals, request_id, result.status)
    if result.status == "killed":
        box.restart()

    # The kernel dies while a thread's call waits.
    pending = submit(box, "import threading, os\nthreading.Thread(target=lambda: tools.refund(4400)).start()\n"
                          "print(*tools.await_request(), flush=True)\nos.kill(os.getpid(), 9)")
    result = pending.result(60)
    assert result.status == "kernel-died"
    (request_id,) = result.stdout.split()
    assert_withdrawn(box, folder, approvals, request_id, "kernel-died")

    # Restarted, the session works, and a fresh request is answered normally.
    box.restart()
    pending = submit(box, "print(tools.refund(4500))")
    request_id = one_request(approvals)
    assert cellgate("approvals", "approve", request_id).returncode == 0
    assert pending.result(60).stdout == "refunded 4500\n"
    assert refunds(folder) == ["4500"]


def test_B6_a_pending_approval_dies_with_its_session(session_factory, tmp_path_factory, approvals: Path) -> None:
    folder = project(tmp_path_factory)
    box = session_factory(config=folder / "cellgate.toml", tools=[])
    pending = submit(box, "tools.refund(4000)")
    request_id = one_request(approvals)
    box.close()
    concurrent.futures.wait([pending], timeout=60)
    assert pending.done()  # the cell's caller is released (the session is gone)
    assert not (approvals / f"{request_id}.request.json").exists()
    done = cellgate("approvals", "approve", request_id)
    assert done.returncode != 0 and "was withdrawn" in done.stderr and "killed" in done.stderr
    assert refunds(folder) == []


CRASHING_HOST = '''
import asyncio, sys
from cellgate.gate.session.session import Session

async def main():
    async with Session(config=sys.argv[1], notebook=sys.argv[2], cwd=sys.argv[3]) as session:
        await session.execute("tools.refund(4000)")

asyncio.run(main())
'''


def test_B6_requests_left_by_a_crashed_session_are_withdrawn_by_recover_and_doctor(tmp_path_factory,
                                                                                  approvals: Path) -> None:
    folder = project(tmp_path_factory)
    notebook = folder / "crashed.ipynb"
    # Its own run root: no other process's start reaps this sandbox before its reaper does.
    env = {**os.environ, "CELLGATE_RUN_ROOT": str(folder / "run")}
    host = subprocess.Popen([sys.executable, "-c", CRASHING_HOST, str(folder / "cellgate.toml"), str(notebook),
                             str(folder)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: list(approvals.glob("*.request.json")), "the crashing host's request", 120)
        request_id = one_request(approvals)
    finally:
        host.kill()  # SIGKILL: the host gets no chance to withdraw anything
        host.wait(30)
    assert (approvals / f"{request_id}.request.json").exists()  # left behind by the dead host
    done = cellgate("recover", str(notebook.with_suffix(".journal.jsonl")))
    assert done.returncode == 0, done.stderr
    assert f"withdrew approval request {request_id}" in done.stderr
    assert not (approvals / f"{request_id}.request.json").exists()
    approve = cellgate("approvals", "approve", request_id)
    assert approve.returncode != 0 and "the session that asked is gone" in approve.stderr
    assert refunds(folder) == []
    # The reaper the dead host left beside its sandbox unmounted the sandbox's socket folder (B3).
    attached = [json.loads(line) for line in notebook.with_suffix(".journal.jsonl").read_text().splitlines()
                if '"kernel-attached"' in line]
    sandbox_id = attached[-1]["sandbox"]["id"]
    # (Without root there is no host mount: the folder's removal is the reaper's one sign of having acted.)
    wait_for(lambda: not mounted(sandbox_id) and not (folder / "run" / sandbox_id).exists(),
             f"the reaper to unmount and remove {sandbox_id}'s run folder", 60)


# ---------------------------------------------------------------- B7
def test_B7_a_pending_approval_is_no_shield_against_the_cell_timeout(session_factory, tmp_path_factory,
                                                                     approvals: Path) -> None:
    folder = project(tmp_path_factory)
    box = session_factory(config=folder / "cellgate.toml", tools=[], cell_timeout=5.0, interrupt_grace=3.0)
    # A thread holds an approval pending while the main thread computes for 40 s.
    pending = submit(box, "import threading, time\nthreading.Thread(target=lambda: tools.refund(4000)).start()\n"
                          "t = time.time()\nwhile time.time() - t < 40:\n    pass\nprint('computed for 40 s')")
    request_id = one_request(approvals)
    result = pending.result(120)
    # Stopped by its 5 s limit (the sandbox's CPU time), not let run its 40 s because a call was pending.
    assert result.status == "timeout" and "timeout" in result.limits_hit, (result.status, result.limits_hit)
    assert "computed for 40 s" not in result.stdout
    assert_withdrawn(box, folder, approvals, request_id, "timeout")

    # Waiting for a person still costs the cell nothing: 8 s idle waiting, over the 5 s limit, then approved
    # (the wall clock passing the limit is the case tested here, not a wait for something to happen).
    started = time.monotonic()
    pending = submit(box, "print(tools.refund(4100))")
    request_id = one_request(approvals)
    wait_for(lambda: time.monotonic() - started > 8, "8 s of waiting", 20)
    assert cellgate("approvals", "approve", request_id).returncode == 0
    result = pending.result(60)
    assert result.status == "ok" and result.stdout == "refunded 4100\n"
    assert refunds(folder) == ["4100"]


# ---------------------------------------------------------------- B8
def test_B8_rules_see_the_defaults_the_tool_will_get(session_factory, tmp_path_factory, approvals: Path) -> None:
    folder = project(tmp_path_factory)
    box = session_factory(config=folder / "cellgate.toml", tools=[])
    # A hand-made request that leaves `amount` out: the allow rule (amount <= 100, no `required`) must not match.
    pending = submit(box, "from cellgate.kernel import runtime\nprint(runtime.client().call('refund', {}))")
    request_id = one_request(approvals)
    asked = json.loads((approvals / f"{request_id}.request.json").read_text())
    assert asked["args"] == {"amount": 5000}  # the person is asked about what the tool would get
    assert cellgate("approvals", "deny", request_id, "--reason", "too much").returncode == 0
    result = pending.result(60)
    assert result.status == "error" and result.error["ename"] == "ToolDenied"
    (call,) = nbformat.read(box.session.notebook_path, as_version=4).cells[-1].metadata.cellgate.calls
    assert call["args"] == {"amount": 5000} and call["rule"] == "tools.refund.decision"
    assert call["decision"] == "approval-denied" and refunds(folder) == []

    # The same request approved: the tool gets exactly the object the rules, the person and the record saw.
    pending = submit(box, "from cellgate.kernel import runtime\nprint(runtime.client().call('refund', {}))")
    request_id = one_request(approvals)
    assert cellgate("approvals", "approve", request_id).returncode == 0
    assert pending.result(60).stdout == "refunded 5000\n"
    (call,) = nbformat.read(box.session.notebook_path, as_version=4).cells[-1].metadata.cellgate.calls
    assert call["args"] == {"amount": 5000} and call["decision"] == "approved" and refunds(folder) == ["5000"]

    # A small amount, passed, is routine; the session works.
    result = box.execute("print(tools.refund(50))")
    assert result.stdout == "refunded 50\n" and refunds(folder) == ["5000", "50"]
    (call,) = nbformat.read(box.session.notebook_path, as_version=4).cells[-1].metadata.cellgate.calls
    assert call["rule"] == "tools.refund.rules[0] (small refunds are routine)"

    # `cellgate policy check` warns about the rule that constrains what it does not require.
    done = cellgate("policy", "check", str(folder / "cellgate.toml"))
    assert done.returncode == 0
    assert ("warning: policy.tools.refund.rules[0] (small refunds are routine) constrains 'amount' but does not "
            "require it: the gate fills in the tool's default 5000 before the rule is checked") in done.stderr
    assert 'add required = ["amount"] to its `when`' in done.stderr


# ---------------------------------------------------------------- B9, PR6
DEATHS = {
    "SIGKILL": "os.kill(os.getpid(), signal.SIGKILL)",
    "segfault": "import ctypes\nctypes.string_at(0)",
    # Forked copies of the kernel, each filling what its address-space cap allows, past the 384 MB cgroup
    # limit: the cgroup's OOM kill.
    "OOM": ("for _ in range(16):\n    if os.fork() == 0:\n        hoard = []\n        try:\n            while True:\n"
            "                hoard.append(b'x' * (16 << 20))\n        except MemoryError:\n            time.sleep(120)\n"
            "        os._exit(0)\ntime.sleep(120)"),
}


def stream_text(box) -> str:
    cell = [c for c in nbformat.read(box.session.notebook_path, as_version=4).cells if c.cell_type == "code"][-1]
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


@pytest.mark.root_only("one of its deaths is the memory cgroup's kill")
def test_B9_output_flushed_before_the_kernel_dies_is_in_the_record_every_time(session_factory) -> None:
    box = session_factory(memory_mb=384)
    rounds = 21
    for i in range(rounds):
        kind = list(DEATHS)[i % len(DEATHS)]
        program = (f"import os, signal, time\nfor j in range(3):\n    print('flushed {i}', j, flush=True)\n"
                   + DEATHS[kind])
        result = box.execute(program)
        assert result.status == ("memory" if kind == "OOM" else "kernel-died"), (i, kind, result.status)
        text = stream_text(box)
        for j in range(3):
            assert text.count(f"flushed {i} {j}\n") == 1, (i, kind, text)  # there, once: never lost, never doubled
        if kind != "OOM":  # after `memory` the session has restarted the kernel itself
            box.restart()
    assert box.execute("print('alive')").stdout == "alive\n"


def test_PR6_lost_iopub_messages_are_counted_not_silent(session_factory) -> None:
    box = session_factory()
    # The kernel numbers every IOPub message; skipping 5 numbers is what 5 dropped messages look like to the host.
    result = box.execute("import itertools\nsend = get_ipython().kernel.session.send\n"
                         "counter = next(c.cell_contents for c in send.__closure__ "
                         "if isinstance(c.cell_contents, itertools.count))\n"
                         "for _ in range(5):\n    next(counter)\nprint('after the gap', flush=True)")
    assert result.status == "ok"
    cell = nbformat.read(box.session.notebook_path, as_version=4).cells[-1]
    notes = [o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
    assert notes == ["[cellgate: 5 output messages lost between the kernel and the host]\n"]
    assert "output-incomplete" in cell.metadata.cellgate.limits_hit
    # A cell without losses says nothing of the kind.
    assert box.execute("print('clean')").stdout == "clean\n"
    cell = nbformat.read(box.session.notebook_path, as_version=4).cells[-1]
    assert "output-incomplete" not in cell.metadata.cellgate.limits_hit


# ---------------------------------------------------------------- B3, X10
FILL = """
import os, socket
def fill(folder):
    written = 0
    try:
        while written < (4000 << 20):  # across many files, each under the file-size rlimit
            with open(os.path.join(folder, f'fill{written >> 22}'), 'ab') as f:
                f.write(b'\\0' * (1 << 20))
            written += 1 << 20
    except OSError as e:
        return written, e.errno
    return written, None
def flood(folder, sockets=False):
    made = 0
    try:
        while made < 10 ** 6:
            path = os.path.join(folder, ('s' if sockets else 'n') + str(made))
            if sockets:
                socket.socket(socket.AF_UNIX).bind(path)
            else:
                open(path, 'w').close()
            made += 1
    except OSError as e:
        return made, e.errno
    return made, None
"""


@pytest.mark.root_only("it reads the host's mount table for the socket tmpfs (test_rootless.py covers the ordinary user's)")
def test_B3_X10_host_backed_writable_folders_are_bounded(session_factory) -> None:
    box = session_factory()
    sandbox = local_sandbox(box.session)
    ipc = sandbox.path("ipc")
    (point,) = mounted(f"{sandbox.id}/ipc")
    info = os.statvfs(ipc)
    assert info.f_blocks * info.f_frsize == mounts.IPC_BYTES and info.f_files == mounts.IPC_INODES
    before = mem_available_mb()
    lowest = [before]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.02):
            lowest[0] = min(lowest[0], mem_available_mb())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # The attack of the report: 4,000 MB into the socket folder.
        result = box.execute(FILL + "print(fill('/run/cellgate/ipc'))")
    finally:
        stop.set()
        watcher.join(10)
    written, errno = eval(result.stdout)  # noqa: S307 - a tuple the test's own cell printed
    assert errno == 28 and written <= mounts.IPC_BYTES, result.stdout  # ENOSPC at the folder's size
    used = os.statvfs(ipc)
    assert (used.f_blocks - used.f_bfree) * used.f_frsize <= mounts.IPC_BYTES
    # The host gave at most the tmpfs's size (plus noise from other work on this machine), not 4,000 MB.
    assert before - lowest[0] < 256, (before, lowest[0])
    assert box.execute("import os\nos.remove('/run/cellgate/ipc/fill0')\nprint('alive')").stdout == "alive\n"
    # X10: files and sockets by the million stop at the folder's inode count.
    result = box.execute(FILL + "print(flood('/run/cellgate/ipc'), flood('/run/cellgate/ipc', sockets=True))")
    (files, files_errno), (sockets, sockets_errno) = eval(result.stdout.replace(") (", "), ("))  # noqa: S307
    assert files_errno == sockets_errno == 28 and files + sockets < mounts.IPC_INODES, result.stdout
    # The private /workspace is a tmpfs of workspace_mb (256 MB by default): ENOSPC there too.
    result = box.execute(FILL + "print(fill('/workspace'))")
    written, errno = eval(result.stdout)  # noqa: S307
    assert errno == 28 and written <= 256 << 20
    # The session still works: its sockets live in that folder.
    assert box.execute("print(tools.echo('still here'))").stdout == "still here\n"
    box.close()
    assert not mounted(sandbox.id)  # unmounted with the sandbox
    assert not ipc.exists()


@pytest.mark.root_only("it mounts a small tmpfs")
def test_B3_a_host_workspace_folder_must_be_bounded(session_factory, tmp_path: Path) -> None:
    from cellgate.gate._errors import SandboxError

    unbounded = tmp_path / "unbounded"
    unbounded.mkdir()
    with pytest.raises(SandboxError) as refused:
        session_factory(workspace=str(unbounded), workspace_mb=16)
    assert f"[sandbox] workspace = {str(unbounded)!r} is on a filesystem with" in str(refused.value)
    assert "more than workspace_mb = 16" in str(refused.value)
    bounded = tmp_path / "bounded"
    bounded.mkdir()
    mounts.mount_tmpfs(bounded, 16 << 20, 1000, 1000)
    try:
        box = session_factory(workspace=str(bounded), workspace_mb=16)
        result = box.execute(FILL + "print(fill('/workspace'))")
        written, errno = eval(result.stdout)  # noqa: S307
        assert errno == 28 and written <= 16 << 20
        assert box.execute("print('alive')").stdout == "alive\n"
        box.close()
    finally:
        mounts.unmount(bounded)


@pytest.mark.root_only("it mounts a tmpfs as a crashed host leaves one")
def test_B3_B6_doctor_clean_removes_what_a_crashed_host_left(tmp_path: Path, approvals: Path) -> None:
    root = tmp_path / "run"
    left = root / "cg-0123456789ab"
    root.mkdir(mode=0o700)  # as a host makes it (doctor cleans only a run root that is the user's alone)
    (left / "ipc").mkdir(parents=True)  # prepared, mounted, then the host died before it wrote owner.json
    mounts.mount_tmpfs(left / "ipc", mounts.IPC_BYTES, 1000, 1000)
    try:
        old = time.time() - 3600
        os.utime(left, (old, old))
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait(30)
        stale = {"id": "feedfacecafe-1", "session": "feedfacecafe", "seq": 1, "tool": "refund",
                 "args": {"amount": 1}, "args_sha256": "0" * 64, "cell_line": None, "source_line": None,
                 "requested": 0.0, "deadline": 9e9, "owner": {"pid": gone.pid, "start_time": "1"}}
        (approvals / "feedfacecafe-1.request.json").write_text(json.dumps(stale))
        doctor = cellgate("doctor", "--clean", CELLGATE_RUN_ROOT=str(root))
        assert f"removed 1 leftover sandbox(es) from {root}: cg-0123456789ab" in doctor.stdout, doctor.stdout
        assert not mounted(str(left)) and not left.exists()
        assert "withdrew 1 approval request(s)" in doctor.stdout and "feedfacecafe-1" in doctor.stdout
        assert not (approvals / "feedfacecafe-1.request.json").exists()
        assert "was withdrawn" in cellgate("approvals", "approve", "feedfacecafe-1").stderr
    finally:
        mounts.unmount_under(root)


def test_B9_the_output_log_is_read_as_the_sandbox_wrote_it_hostile(session_factory) -> None:
    box = session_factory()
    host_file = Path("/etc/passwd").read_text().splitlines()[0]
    # The log replaced by a link to a host file, by a FIFO, and by records claiming another cell's output.
    for trick in ("os.symlink('/etc/passwd', log)", "os.mkfifo(log)",
                  "open(log, 'w').write(json.dumps({'p': 'other', 'n': 'stdout', 'o': 0, 't': 'forged'}) + '\\n'"
                  " + 'garbage\\n' * 1000)"):
        result = box.execute("import os, json, signal\nlog = '/run/cellgate/ipc/output.log'\n"
                             "print('before', flush=True)\nkernel = get_ipython().kernel\n"
                             "kernel.output_log._broken = True\nif os.path.lexists(log):\n    os.remove(log)\n"
                             f"{trick}\nos.kill(os.getpid(), signal.SIGKILL)", timeout=60)
        assert result.status == "kernel-died", trick
        text = "".join(o.get("text", "") for o in [c for c in nbformat.read(box.session.notebook_path, as_version=4)
                                                    .cells if c.cell_type == "code"][-1].outputs)
        assert host_file not in text and "forged" not in text, (trick, text)
        box.restart()
    assert box.execute("print('alive')").stdout == "alive\n"
