"""README claim (issue 21): `cellgate doctor --clean` removes sandboxes left by crashed sessions, and only those.

A host process that owns a sandbox is SIGKILLed together with the reaper that would have cleaned up after it
(as when the machine kills the whole session), leaving a running runsc sandbox and its run folder. Everything
runs under a run root and approvals folder of this test's own, so `doctor --clean` cannot touch another run's
sandboxes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cellgate

from cellgate.gate.sandbox.local.container import reap_leftovers
from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.gvisor

SAMPLE = Path(__file__).resolve().parent.parent / "tools" / "sample_tools.py"
HOST = """
import asyncio, sys
from cellgate.gate.session.session import Session

async def main():
    async with Session(config=sys.argv[1], notebook=sys.argv[2], cwd=sys.argv[3]) as session:
        print((await session.execute("print('up')")).stdout.strip(), flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""



@pytest.fixture()
def own_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> Iterator[Path]:
    root = tmp_path / "run"
    monkeypatch.setenv("CELLGATE_RUN_ROOT", str(root))
    monkeypatch.setenv("CELLGATE_APPROVALS_DIR", str(tmp_path / "approvals"))
    try:
        yield root
    finally:
        reap_leftovers(root)  # whatever a failed run of this test left, in its own root only


def sandboxes(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.name.startswith("cg-")} if root.is_dir() else set()


def processes_naming(text: str) -> list[int]:
    """Pids of processes whose command line contains ``text`` (runsc's, the reaper's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(int(entry.name))
    return found


def wait_for(condition: Callable[[], Any], what: str, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.1)
    return value


def test_doctor_clean_removes_a_crashed_session_s_sandbox_and_leaves_live_ones(tmp_path: Path, own_root: Path) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text(f"[tools]\nmodules = [{json.dumps(str(SAMPLE))}]\n[sandbox]\nsnapshot = false\n")
    host = subprocess.Popen([sys.executable, "-c", HOST, str(config), str(tmp_path / "crashed.ipynb"), str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert host.stdout is not None and host.stdout.readline() == "up\n"
        (crashed,) = sandboxes(own_root)
        live = BlockingSession(config=config, notebook=tmp_path / "live.ipynb", cwd=tmp_path).start()
        try:
            (alive,) = sandboxes(own_root) - {crashed}
            # The crash: the reaper beside the host goes first, then the host, both without a chance to clean.
            (reaper,) = [pid for pid in processes_naming(f"reaper.py {own_root} {host.pid}")]
            os.kill(reaper, signal.SIGKILL)
            host.kill()
            host.wait(30)
            assert crashed in sandboxes(own_root) and processes_naming(crashed), "nothing was left to clean"

            done = cellgate("doctor", "--clean", timeout=600, env={"COLUMNS": "300"})
            said = " ".join(done.stdout.split())
            assert done.returncode == 0, done.stdout + done.stderr
            assert f"removed 1 leftover sandbox(es) from {own_root}: {crashed}" in said, said
            assert crashed not in sandboxes(own_root)
            wait_for(lambda: not processes_naming(crashed), f"the runsc processes of {crashed} to end", 60)
            # The live session's sandbox was not touched and still runs cells.
            assert alive in sandboxes(own_root) and processes_naming(alive)
            assert live.execute("print(40 + 2)").stdout == "42\n"
        finally:
            live.close()
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(30)
        if host.stdout is not None:
            host.stdout.close()
