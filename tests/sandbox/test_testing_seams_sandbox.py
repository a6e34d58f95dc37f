"""The test seams and constructor seams through a real sandboxed session: approver, tool source, journal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate.audit.journal import Journal
from cellgate.gate.testing import BlockingSession, FakeToolSource, ScriptedApprover

pytestmark = pytest.mark.gvisor


def double(x: int) -> int:
    """Twice x."""
    return 2 * x


CELL = """
print(tools.double(2))
try:
    tools.double(3)
except tools.ToolDenied as exc:
    print("denied:", exc)
"""


def test_a_scripted_approver_answers_calls_to_a_fake_sources_tools(runsc: object, tmp_path: Path) -> None:
    approver = ScriptedApprover(["allow", "deny"])
    source = FakeToolSource([double], decision="approve", notes=[{"message": "served from memory"}])
    with BlockingSession(sources=[source], approver=approver, notebook=tmp_path / "run.ipynb", cwd=tmp_path) as box:
        assert [entry["name"] for entry in box.session.manifest] == ["double"]
        result = box.execute(CELL)
        assert result.ok, result.text
        lines = result.stdout.splitlines()
        assert lines[0] == "4" and lines[1].startswith("denied:"), result.stdout
        assert [(c.tool, c.args, c.ok) for c in result.calls] == [("double", {"x": 2}, True),
                                                                  ("double", {"x": 3}, False)]
        assert (source.opened, source.closed) == (1, 0)
        journal = box.session.notebook_path.with_name("run.journal.jsonl")
    assert [(r.tool, r.args) for r in approver.asked] == [("double", {"x": 2}), ("double", {"x": 3})]
    assert (source.opened, source.closed) == (1, 1)  # closed with the session, once
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    assert any(e["event"] == "tool-source-note" and e.get("message") == "served from memory" for e in events)


class CountingJournal(Journal):
    """The shipped journal, counting what it is asked to write."""

    opened: list[CountingJournal] = []

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.events: list[str] = []
        CountingJournal.opened.append(self)

    def append(self, event: str, sync: bool = False, **data: Any) -> dict[str, Any]:
        self.events.append(event)
        return super().append(event, sync=sync, **data)


def test_the_journal_is_a_constructor_seam(runsc: object, tmp_path: Path) -> None:
    CountingJournal.opened.clear()
    with BlockingSession(journal_factory=CountingJournal, notebook=tmp_path / "j.ipynb", cwd=tmp_path) as box:
        assert box.execute("print(6 * 7)").stdout == "42\n"
        assert box.session.recorder.journal is CountingJournal.opened[0]
    (journal,) = CountingJournal.opened
    assert journal.events[0] == "session-started" and "cell-sent" in journal.events
    written = [json.loads(line)["event"] for line in journal.path.read_text().splitlines()]
    assert written == journal.events  # the seam wraps the real journal: every record it was given is on disk
