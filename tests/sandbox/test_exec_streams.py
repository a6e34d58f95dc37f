"""`cellgate exec` prints a cell's output as it comes, and says why a cell the host stopped ended."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import CELLGATE, SAMPLE_TOOLS, cellgate

from cellgate.gate.calls.approval_queue import answer

pytestmark = pytest.mark.gvisor


def lines_of(stream: object) -> queue.Queue[str]:
    """The stream's lines as they come, read on a thread (a read with a bound, not a sleep)."""
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            found.put(line)
        found.put("")  # the end

    threading.Thread(target=read, daemon=True).start()
    return found


def test_output_printed_before_an_approval_wait_is_seen_before_the_answer(tmp_path: Path, approvals: Path,
                                                                          runsc: object) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[tools]\nmodules = [{json.dumps(str(SAMPLE_TOOLS))}]\n[policy]\ndefault = "allow"\n'
                      'approver = "queue"\napproval_timeout = 300\n[policy.tools.add]\ndecision = "approve"\n')
    program = "print('before the wait', flush=True)\nprint('sum', tools.add(4, 5))\n"
    env = {**os.environ, "CELLGATE_APPROVALS_DIR": str(approvals)}
    with subprocess.Popen([*CELLGATE, "exec", "-", "--config", str(config), "--notebook", str(tmp_path / "r.ipynb")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          cwd=tmp_path) as cli:
        try:
            assert cli.stdin is not None and cli.stdout is not None and cli.stderr is not None
            cli.stdin.write(program)
            cli.stdin.close()
            out, err = lines_of(cli.stdout), lines_of(cli.stderr)
            waiting = ""
            while "waiting for approval" not in waiting:
                waiting = err.get(timeout=240)
                assert waiting, "cellgate exec ended without printing a waiting notice"
            request = re.search(r"request (\S+),", waiting)
            assert request, waiting
            # The call waits for this answer: the line printed before it must be out already.
            try:
                first = out.get(timeout=60)
            except queue.Empty:
                raise AssertionError("the line printed before the approval wait was not out while the call "
                                     "waited") from None
            assert first == "before the wait\n"
            answer(request[1], "allow", "from the test")
            assert out.get(timeout=240) == "sum 9\n"
            assert out.get(timeout=240) == ""
            assert cli.wait(timeout=240) == 0
        finally:
            if cli.poll() is None:
                cli.kill()


@pytest.mark.root_only  # the sandbox's memory cgroup needs root here (test_limits covers a delegated one)
def test_a_cell_stopped_at_the_memory_limit_says_why(tmp_path: Path, runsc: object) -> None:
    (tmp_path / "cellgate.toml").write_text("[sandbox]\nmemory_mb = 512\ncell_timeout = 60\n")
    # Forked copies of the kernel, each under its address-space cap, pass the sandbox's limit together.
    hog = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    done = cellgate("exec", "-", "--notebook", str(tmp_path / "m.ipynb"), stdin=hog, cwd=tmp_path)
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "cell - ended with status memory (limits hit: memory): SandboxMemoryLimit: the sandbox reached its " \
           "512 MB memory limit ([sandbox] memory_mb)" in message, message
