"""No sandbox outlives its session: shutdown, kernel death, a SIGKILLed host, or a start cut short."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE_TOOLS

from cellgate.gate.config import SandboxSettings, Settings
from cellgate.gate.sandbox.backend import SandboxRequest
from cellgate.gate.sandbox.local.container import Sandbox, run_root
from cellgate.gate.sandbox.local.local_backend import LocalBackend


def processes_of(sandbox_id: str) -> list[str]:
    out = subprocess.run(["pgrep", "-a", "-f", sandbox_id], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def cgroups_of(sandbox_id: str) -> list[Path]:
    """As root, the cgroups runsc made for the sandbox (``/cellgate/<id>`` in each hierarchy)."""
    root = Path("/sys/fs/cgroup")
    return sorted([*root.glob(f"*/cellgate/{sandbox_id}"), *root.glob(f"cellgate/{sandbox_id}")])


def wait_until_gone(sandbox_id: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while processes_of(sandbox_id) or (run_root() / sandbox_id).exists():
        assert time.monotonic() < deadline, f"sandbox {sandbox_id} still there: {processes_of(sandbox_id)}"
        time.sleep(0.1)  # polling the process table for the reaper's work


def test_shutdown_removes_the_sandbox(session_factory) -> None:
    box = session_factory()
    sandbox_id = box.session.provisioner.handle.id
    assert processes_of(sandbox_id)
    box.close()
    assert processes_of(sandbox_id) == []
    assert not (run_root() / sandbox_id).exists()
    assert cgroups_of(sandbox_id) == []


@pytest.mark.root_only  # runsc makes a sandbox's cgroups itself only as root
def test_a_start_cut_short_leaves_none_of_runscs_cgroups() -> None:
    # runsc makes the cgroups first; deleted then (its state not yet written), runsc delete left them all behind.
    settings = Settings(sandbox=SandboxSettings())
    request = SandboxRequest.from_settings(settings.sandbox, {"x.py": ""}, "k" * 64, "s" * 32)
    config = LocalBackend(settings).launch_config(request)
    for _ in range(2):
        sandbox = Sandbox(config, request.tools_files, request.key)
        sandbox.start()
        try:
            while not cgroups_of(sandbox.id):
                assert sandbox.poll() is None, sandbox.log_tail()
                time.sleep(0.002)  # polling for the moment runsc has made them
        finally:
            sandbox.delete()
        assert cgroups_of(sandbox.id) == [] and processes_of(sandbox.id) == []


def test_sigkill_of_the_host_process_leaves_no_sandbox(tmp_path: Path, runsc: object) -> None:
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from cellgate.gate.testing import BlockingSession
        box = BlockingSession(tools=[{str(SAMPLE_TOOLS)!r}], notebook={str(tmp_path / 'run.ipynb')!r}).start()
        assert box.execute("x = 1").ok
        print(box.session.provisioner.handle.id, flush=True)
        sys.stdin.read()
    """))
    with subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, cwd=ROOT) as host:
        try:
            sandbox_id = host.stdout.readline().strip()
            assert sandbox_id.startswith("cg-") and processes_of(sandbox_id)
            os.kill(host.pid, signal.SIGKILL)
            host.wait(30)
            wait_until_gone(sandbox_id)
        finally:
            if host.poll() is None:
                host.kill()
    # The journal kept what the host had written before it died.
    assert "cell-ended" in (tmp_path / "run.journal.jsonl").read_text()
