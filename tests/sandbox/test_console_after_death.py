"""`jupyter console` goes on after the sandboxed kernel dies mid-cell: the host's own execute_reply for the killed
cell carries an execution_count, which the console adds to for its next prompt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cellgate

pytestmark = pytest.mark.gvisor

# The second cell kills the kernel, mostly before IOPub delivers its execute_input: the host then never learns
# the cell's count, and its reply carries the kernel's counter as last seen.
CELLS = ["import os", "os.kill(os.getpid(), 9)"]


def test_jupyter_console_survives_a_kernel_death(tmp_path: Path, runsc: object) -> None:
    prefix = tmp_path / "prefix"
    installed = cellgate("install", "--prefix", str(prefix), timeout=120)
    assert "installed kernelspec 'cellgate'" in installed.stdout, installed.stdout + installed.stderr
    config = tmp_path / "cellgate.toml"
    config.write_text('[audit]\ndir = "audit"\n')
    env = {**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter"), "CELLGATE_CONFIG": str(config)}
    console = [str(Path(sys.executable).with_name("jupyter-console")), "--kernel", "cellgate", "--simple-prompt"]
    done = subprocess.run(console, input="\n".join(CELLS) + "\n", capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert "CellKilled: the sandboxed kernel was stopped (kernel-died)" in done.stderr, done.stdout + done.stderr
    assert "TypeError" not in done.stderr, done.stderr
    # The console read on to the end of its input (it asks before exiting), instead of its loop dying.
    assert "Do you really want to exit" in done.stdout, done.stdout + done.stderr
