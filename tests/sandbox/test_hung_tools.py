"""A tool that never returns fails its call at the deadline and does not keep the host process alive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import cellgate

from cellgate.gate.audit.recorder import journal_path

# Blocks on an event nobody sets: it returns only when the process ends.
HUNG_TOOL = '''
import threading

NEVER = threading.Event()


def wait_forever() -> str:
    """Wait for something that never comes."""
    NEVER.wait()
    return "never"
'''


def test_exec_exits_after_the_cell_and_journals_the_abandoned_call(tmp_path: Path, runsc: object) -> None:
    (tmp_path / "hung.py").write_text(HUNG_TOOL)
    (tmp_path / "cellgate.toml").write_text('[sandbox]\ncall_timeout = 2\n\n[policy.tools.wait_forever]\n'
                                            'decision = "allow"\n')
    notebook = tmp_path / "run.ipynb"
    program = "try:\n    tools.wait_forever()\nexcept tools.ToolTimeout as e:\n    print('timed out:', e.kind)\n"
    try:
        # The bound only: the tool never returns, so on the old code exec never exits.
        done = cellgate("exec", "-", "--tools", str(tmp_path / "hung.py"), "--notebook", str(notebook),
                        stdin=program, cwd=tmp_path, timeout=120)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("cellgate exec was still running long after its cell ended (a hung tool's "
                             "thread held the process)") from exc
    assert done.returncode == 0, done.stderr
    assert done.stdout == "timed out: timeout\n"
    journal = [json.loads(line) for line in journal_path(notebook).read_text().splitlines()]
    (abandoned,) = [r for r in journal if r["event"] == "calls-abandoned"]
    (call,) = abandoned["calls"]
    assert call["tool"] == "wait_forever" and call["seq"] == 1
    assert [r["event"] for r in journal][-1] == "session-ended"


SESSION_SCRIPT = '''
import asyncio, sys
from cellgate.gate import Session

async def main():
    async with Session(config=sys.argv[1], tools=[sys.argv[2]], notebook=sys.argv[3]) as session:
        result = await session.execute("tools.wait_forever()")
        print(result.status, result.error["ename"])

asyncio.run(main())
'''


def test_a_session_script_exits_after_its_session_ends(tmp_path: Path, runsc: object) -> None:
    (tmp_path / "hung.py").write_text(HUNG_TOOL)
    config = tmp_path / "cellgate.toml"
    config.write_text('[sandbox]\ncall_timeout = 2\n')
    notebook = tmp_path / "script.ipynb"
    try:
        done = subprocess.run([sys.executable, "-c", SESSION_SCRIPT, str(config), str(tmp_path / "hung.py"),
                               str(notebook)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the Session script was still running long after its session ended") from exc
    assert done.returncode == 0, done.stderr
    assert done.stdout == "error ToolTimeout\n"
    events = [json.loads(line)["event"] for line in journal_path(notebook).read_text().splitlines()]
    assert "calls-abandoned" in events
