"""P1 (no silent fallback without gVisor), PR4 (socket and connection-file permissions), D4 (an audit that
cannot be written stops the gate)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from conftest import cellgate, local_sandbox

from cellgate.gate import SessionError


def test_P1_without_a_usable_runsc_nothing_runs(tmp_path: Path) -> None:
    done = cellgate("exec", "-", "--notebook", str(tmp_path / "run.ipynb"), stdin="print('this ran')", timeout=120,
                    env={"CELLGATE_RUNSC": str(tmp_path / "no-such-runsc")})
    assert done.returncode == 3, done.stderr
    assert "this ran" not in done.stdout and "runsc" in done.stderr


def test_PR4_the_kernel_sockets_and_connection_file_are_private(session_factory) -> None:
    box = session_factory()
    sandbox = local_sandbox(box.session)
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


FILL_TOOL = '''
import os

def fill_disk(folder: str) -> bool:
    """Write into folder until not one more byte fits, then give back one page: room for a short record (this
    call's own end), never for the next call's 8 KB intent, however full the journal's last page happens to be."""
    with open(os.path.join(folder, "filler"), "wb", buffering=0) as out:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while out.write(b"x" * chunk):
                    pass
            except OSError:
                pass
        out.truncate(out.tell() - 4096)
    return True

def note(text: str) -> int:
    """A side effect: one line per execution in $CELLGATE_TEST_COUNT_FILE."""
    with open(os.environ["CELLGATE_TEST_COUNT_FILE"], "a") as ledger:
        ledger.write(f"note {len(text)}\\n")
    return len(text)
'''


@pytest.fixture()
def small_disk(tmp_path: Path) -> object:
    """A 2 MB tmpfs: a real full disk under the journal, not a flag set by the test."""
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.root_only("its small disk is a tmpfs mount")
def test_D4_a_journal_that_breaks_between_two_calls_refuses_the_second(session_factory, small_disk: Path,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    count = tmp_path / "count"
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(count))
    (tmp_path / "fill.py").write_text(FILL_TOOL)
    box = session_factory(tools=[tmp_path / "fill.py"], notebook=small_disk / "run.ipynb")
    # The second note's intent record (8 KB of arguments) cannot fit on the full disk: it must never run.
    result = box.execute(f'''
print(tools.note("first"))
tools.fill_disk({str(small_disk)!r})
try:
    tools.note("x" * 8192)
except tools.ToolUnavailable as e:
    print("refused:", e)
''', timeout=120)
    assert count.read_text() == "note 5\n"  # the second note never ran
    # What the cell printed could not be recorded either; the refusal is in the host's own call records.
    refused = [c for c in result.calls if c.tool == "note" and not c.ok]
    assert len(refused) == 1 and "audit journal" in str(refused[0].error), result.calls
