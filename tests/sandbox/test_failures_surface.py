"""Failures inside the host never go unnoticed (issue 30): a journal that breaks in the middle of a cell does not
stop the cell's limits from being enforced, and a relay task that dies ends the session with a recorded reason."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from cellgate.gate import SessionError
from cellgate.gate.audit.journal import Journal

# CPU or wall time counts here: never beside another such test (tests/conftest.py, the xdist groups).
pytestmark = [pytest.mark.gvisor, pytest.mark.xdist_group("cpu")]

MARK = "journal-breaks-now"


class BreakingJournal(Journal):
    """The shipped journal, which breaks for good (as a full disk does) once it has written an output holding
    ``MARK``: the cell printing it is running, and every write after it fails."""

    def append(self, event: str, sync: bool = False, **data: Any) -> dict[str, Any]:
        record = super().append(event, sync=sync, **data)
        if event == "output" and MARK in json.dumps(data):
            self.broken = "the disk is full (the test's journal broke after the cell started)"
        return record


def test_a_journal_that_breaks_mid_cell_still_lets_the_timeout_interrupt_the_cell(session_factory) -> None:
    # A long grace: the interrupted kernel answers at once when it is well, and a loaded CI machine once took over 2 s.
    box = session_factory(journal_factory=BreakingJournal, cell_timeout=3.0, interrupt_grace=15.0)
    result = box.execute(f"print({MARK!r}, flush=True)\nwhile True:\n    pass", timeout=60)
    assert result.status == "timeout", result
    assert result.error is not None and result.error["ename"] == "KeyboardInterrupt", result.error
    assert "timeout" in result.limits_hit
    assert not box.session.dead  # interrupted, not killed: the kernel lives on


def test_a_journal_that_breaks_mid_cell_still_lets_the_grace_kill_a_loop_ignoring_the_interrupt(
        session_factory) -> None:
    box = session_factory(journal_factory=BreakingJournal, cell_timeout=2.0, interrupt_grace=1.5)
    result = box.execute(
        f"import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint({MARK!r}, flush=True)\n"
        "while True:\n    try:\n        pass\n    except BaseException:\n        pass", timeout=60)
    assert result.status == "killed", result
    assert "timeout" in result.limits_hit
    assert box.session.dead


class BuggyJournal(Journal):
    """A journal with a bug (not a disk error): it raises on the cell-sent record of a cell holding ``MARK``,
    which the relay writes on its shell pump. ``failed`` is set when it raised."""

    failed = threading.Event()

    def append(self, event: str, sync: bool = False, **data: Any) -> dict[str, Any]:
        if event == "cell-sent" and MARK in str(data.get("source")):
            BuggyJournal.failed.set()
            raise RuntimeError("a bug in the journal")
        return super().append(event, sync=sync, **data)


def test_a_relay_task_that_dies_ends_the_session_with_a_recorded_reason(session_factory) -> None:
    BuggyJournal.failed.clear()
    box = session_factory(journal_factory=BuggyJournal)
    assert box.execute("print('before')").stdout == "before\n"
    with pytest.raises(SessionError, match="a bug in the journal") as failed:
        box.execute(f"print({MARK!r})", timeout=60)  # before the fix: no answer until the timeout
    assert BuggyJournal.failed.is_set()
    assert "_pump_to_kernel" in str(failed.value)
    with pytest.raises(SessionError, match="a bug in the journal"):  # later cells are refused at once
        box.execute("print('after')", timeout=60)
    journal = box.session.notebook_path.with_name(box.session.notebook_path.stem + ".journal.jsonl")
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    (error,) = [e for e in events if e["event"] == "gate-error"]
    assert "RuntimeError: a bug in the journal" in error["error"] and "_pump_to_kernel" in error["task"], error
    assert "after" not in journal.read_text()
