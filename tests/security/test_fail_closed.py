"""P1 (no silent fallback without gVisor), PR4 (socket and connection-file permissions), D4 (an audit that
cannot be written stops the gate)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from cellgate.gate import SessionError

pytestmark = pytest.mark.gvisor


def test_P1_without_a_usable_runsc_nothing_runs(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "cellgate.gate.cli", "exec", "-", "--notebook",
                           str(tmp_path / "run.ipynb")], input="print('this ran')", capture_output=True, text=True,
                          timeout=120, env={**os.environ, "CELLGATE_RUNSC": str(tmp_path / "no-such-runsc")})
    assert done.returncode == 3, done.stderr
    assert "this ran" not in done.stdout and "runsc" in done.stderr


def test_PR4_the_kernel_sockets_and_connection_file_are_private(session_factory) -> None:
    box = session_factory()
    sandbox = box.session.provisioner.sandbox
    for folder in (sandbox.root, sandbox.path("ipc")):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(sandbox.path("conn", "kernel.json").stat().st_mode) == 0o400
    frontend = Path(box.session.connection_file)
    assert stat.S_IMODE(frontend.stat().st_mode) & 0o077 == 0  # the frontend's file: owner only


def test_D4_an_unwritable_journal_stops_cells_and_calls(session_factory) -> None:
    box = session_factory()
    assert box.execute("print(tools.echo('before'))").stdout == "before\n"
    journal = box.session.recorder.journal
    journal.broken = "the disk is full (simulated by the test)"
    try:
        with pytest.raises(SessionError, match="does not run a cell it cannot record"):
            box.execute("print('this must not run')", timeout=60)
    finally:
        journal.broken = None
    assert "this must not run" not in box.session.notebook_path.read_text()
    assert box.execute("print(tools.echo('after'))").stdout == "after\n"
