"""Entry points read once for each ``sys.path`` (issue 33: a session's start read every distribution's metadata
seven times), and a distribution put on ``sys.path`` later is seen, as the extension tests install theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cellgate.gate._entry_points import entry_points

GROUP = "cellgate.test_entry_points_read_once"


def test_a_group_is_read_once_and_a_distribution_put_on_the_path_later_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = entry_points(GROUP)
    assert before == () and entry_points(GROUP) is before  # the same answer, not read again
    info = tmp_path / "lateplugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lateplugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nlate = json:dumps\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [(e.name, e.value) for e in entry_points(GROUP)] == [("late", "json:dumps")]
    monkeypatch.undo()
    assert entry_points(GROUP) is before
