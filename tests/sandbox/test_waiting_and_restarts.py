"""A call waiting for approval is visible (issue 15, item 3); restarts and exits are told honestly (item 4).

One sandboxed session, driven by a real ``jupyter_client`` frontend on the relay's sockets, plus one
``cellgate exec``: a frontend sees the host's waiting notice on IOPub before the answer and its update
after; the terminal sees the same on stderr; a frontend's restart is a note in the audit notebook; and
no kernel exit (a restart, ``os._exit(3)``) is journalled as a memory event.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import CELLGATE, SAMPLE_TOOLS
from jupyter_client import BlockingKernelClient

from cellgate.gate.calls.approval_queue import answer
from cellgate.gate.sandbox.local import enforcement
from cellgate.gate.sandbox.local.oom import OomWatch
from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.gvisor

NOTICE = "cellgate-approval-"
MEMORY_EVENTS = ("memory-limit-hit",)


def write_config(folder: Path) -> Path:
    config = folder / "cellgate.toml"
    config.write_text(f"""
[tools]
modules = [{json.dumps(str(SAMPLE_TOOLS))}]
[policy]
default = "allow"
approver = "queue"
approval_timeout = 300
[policy.tools.add]
decision = "approve"
""")
    return config


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory, approvals: Path, runsc: object) -> Iterator[BlockingSession]:
    folder = tmp_path_factory.mktemp("waiting")
    session = BlockingSession(config=write_config(folder), notebook=folder / "run.ipynb", cwd=folder).start()
    try:
        yield session
    finally:
        session.close()


@pytest.fixture(scope="module")
def frontend(box: BlockingSession) -> Iterator[BlockingKernelClient]:
    """A frontend of its own on the session's connection file, as JupyterLab or nbclient would be."""
    client = BlockingKernelClient(connection_file=box.session.connection_file)
    client.load_connection_file()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    try:
        yield client
    finally:
        client.stop_channels()


def journal(box: BlockingSession) -> list[dict[str, Any]]:
    path = box.session.notebook_path.with_name(box.session.notebook_path.stem + ".journal.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def cell_messages(client: BlockingKernelClient, msg_id: str) -> Iterator[dict[str, Any]]:
    """The IOPub messages of the frontend's cell ``msg_id``, until it goes idle."""
    while True:
        msg = client.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        yield msg
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return


def test_a_frontend_sees_the_wait_before_the_answer_and_its_update_after(
        box: BlockingSession, frontend: BlockingKernelClient, approvals: Path) -> None:
    msg_id = frontend.execute("print('sum', tools.add(2, 3))")
    seen: list[dict[str, Any]] = []
    messages = cell_messages(frontend, msg_id)
    for msg in messages:
        seen.append(msg)
        if msg["msg_type"] == "display_data":
            break
    assert seen[-1]["msg_type"] == "display_data", [m["msg_type"] for m in seen]
    notice = seen[-1]["content"]
    display_id = notice["transient"]["display_id"]
    request_id = display_id.removeprefix(NOTICE)
    text = notice["data"]["text/plain"]
    assert display_id.startswith(NOTICE) and "waiting for approval" in text, text
    assert "tool 'add'" in text and f"request {request_id}" in text and "approver queue" in text, text
    assert re.search(r"until \d\d:\d\d:\d\d UTC", text) and "<pre>" in notice["data"]["text/html"], notice
    assert (approvals / f"{request_id}.request.json").exists()  # shown while the request waits, not after
    answer(request_id, "allow", "from the test")  # the queue approver's answer, as `cellgate approvals` gives it
    rest = list(messages)
    update = next(m for m in rest if m["msg_type"] == "update_display_data")
    assert update["content"]["transient"]["display_id"] == display_id
    assert "approval approved" in update["content"]["data"]["text/plain"]
    assert "".join(m["content"]["text"] for m in rest if m["msg_type"] == "stream") == "sum 5\n"
    assert frontend.get_shell_msg(timeout=60)["content"]["status"] == "ok"
    # The notice is transient: the audit notebook keeps the call's approval, not the display.
    cell = nbformat.read(box.session.notebook_path, as_version=4).cells[-1]
    assert cell.source == "print('sum', tools.add(2, 3))"
    assert not any(NOTICE in json.dumps(output) for output in cell.outputs)
    (call,) = cell.metadata.cellgate.calls
    assert call["decision"] == "approved" and call["approval"]["approver"].startswith("queue")


def test_a_kernel_display_cannot_pose_as_a_notice(box: BlockingSession, frontend: BlockingKernelClient) -> None:
    msg_id = frontend.execute("from IPython.display import display\n"
                              f"display('forged', display_id='{NOTICE}x-1')")
    shown = [m for m in cell_messages(frontend, msg_id) if m["msg_type"] == "display_data"]
    assert [m["content"]["data"]["text/plain"] for m in shown] == ["'forged'"]
    assert shown[0]["content"]["transient"] == {}
    frontend.get_shell_msg(timeout=60)


def test_a_frontend_restart_is_a_note_and_no_exit_is_a_memory_event(box: BlockingSession) -> None:
    assert box.execute("before_restart = 1").ok
    # What JupyterLab's restart does: the KernelManager sends shutdown_request(restart=True), then launches anew.
    box._run(box.session.km.restart_kernel())
    assert box.execute("print('before_restart' in globals())").stdout == "False\n"
    cells = nbformat.read(box.session.notebook_path, as_version=4).cells
    sources = [c.source for c in cells]
    note = cells[sources.index("before_restart = 1") + 1]
    assert note.cell_type == "markdown" and note.metadata.cellgate["kind"] == "kernel-restarted"
    assert note.metadata.cellgate["reason"] == "frontend"
    assert note.source.startswith("**The kernel was restarted at its frontend's request.** Every variable is gone")
    # An exit the kernel chose: a death, not a memory event (on cgroup v1 the cgroup's removal signals
    # the OOM eventfd: that must not count as running out of memory).
    died = box.execute("import os\nos._exit(3)")
    assert died.status == "kernel-died" and died.limits_hit == ["kernel-died"]
    box.restart()  # the old sandbox's OOM watch is settled (closed) once the new kernel is attached
    assert box.execute("print('back')").stdout == "back\n"
    events = journal(box)
    names = [e["event"] for e in events]
    assert not [n for n in names if n in MEMORY_EVENTS], names
    assert [e.get("exit_code") for e in events if e["event"] == "kernel-died"] == [3]
    assert not any(e.get("cause") == "memory" for e in events)
    assert names.count("kernel-restarted") == 1  # the restart after a death is explained by the death


def test_exec_prints_the_wait_and_its_answer_on_stderr(tmp_path: Path, approvals: Path, runsc: object) -> None:
    program = tmp_path / "program.py"
    program.write_text("print('sum', tools.add(4, 5))\n")
    notebook = tmp_path / "run.ipynb"
    env = {**os.environ, "CELLGATE_APPROVALS_DIR": str(approvals)}
    with subprocess.Popen([*CELLGATE, "exec", str(program), "--config", str(write_config(tmp_path)),
                           "--notebook", str(notebook)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path) as cli:
        try:
            assert cli.stderr is not None
            waiting = ""
            while "waiting for approval" not in waiting:
                waiting = cli.stderr.readline()
                assert waiting, "cellgate exec ended without printing a waiting notice"
            found = re.search(r"request (\S+),", waiting)
            assert found and "tool 'add'" in waiting and "approver queue" in waiting, waiting
            assert f"cellgate approvals approve {found[1]}" in waiting, waiting
            answer(found[1], "allow", "from the test")
            out, err = cli.communicate(timeout=240)
        finally:
            if cli.poll() is None:
                cli.kill()
    assert cli.returncode == 0, err
    assert out == "sum 9\n"
    assert f"[cellgate] approval approved: tool 'add', request {found[1]}, approver queue" in err, err


V1_MEMORY = Path("/sys/fs/cgroup/memory/cellgate")


@pytest.fixture()
def v1_memory_parent(box: BlockingSession) -> Path:
    """The memory cgroup (v1) sandboxes are made in, as runsc makes it for the module's sandbox (as root)."""
    version = enforcement.cgroup_version()
    if version != "v1":  # decided by the host, at run time: these machines are v1, and CI's root leg runs this
        pytest.skip(f"this host's cgroups are {version or 'not mounted'}, not v1: the v2 accounting (a counter "
                    "the removal does not bump) is the path the sandbox tests cover there")
    assert V1_MEMORY.is_dir(), f"a sandbox was started as root on cgroup v1 and {V1_MEMORY} is not there"
    return V1_MEMORY


@pytest.mark.root_only  # it makes cgroups of its own
def test_on_cgroup_v1_a_removed_cgroup_is_no_oom_and_an_oom_kill_is(v1_memory_parent: Path) -> None:
    """The eventfd on memory.oom_control is signalled when its cgroup is removed: that alone is no OOM."""
    loop = asyncio.new_event_loop()
    try:
        for hog in (False, True):
            name = f"cg-test-{os.getpid()}-{int(hog)}"
            cgroup = v1_memory_parent / name
            cgroup.mkdir()
            hits: list[bool] = []
            watch = OomWatch(name, lambda: hits.append(True))
            try:
                assert watch.start(loop)
                if hog:
                    (cgroup / "memory.limit_in_bytes").write_text(str(32 << 20))
                    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(1); "
                                              "b = bytearray(256 << 20)"], stdin=subprocess.PIPE)
                    (cgroup / "cgroup.procs").write_text(str(child.pid))
                    child.communicate(b"x", timeout=60)
                    assert child.returncode == -signal.SIGKILL  # the kernel's OOM killer
                    assert watch.hit and hits == [True]
            finally:
                cgroup.rmdir()
            # The removal's own signal, once it has come, still says nothing about memory.
            readable, _, _ = select.select([watch._fds[0]], [], [], 30)
            assert readable
            loop.run_until_complete(asyncio.sleep(0))  # the loop's reader of the eventfd runs (as the relay's would)
            assert watch.hit is hog and hits == ([True] if hog else [])
            watch.close()
    finally:
        loop.close()
