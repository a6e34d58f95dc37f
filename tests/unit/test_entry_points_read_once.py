"""Entry points read once for each ``sys.path`` (issue 33: a session's start read every distribution's metadata
seven times), and a distribution put on ``sys.path`` later is seen, as the extension tests install theirs."""

from __future__ import annotations

from pathlib import Path

import pytest

from cellgate.gate._entry_points import entry_points

GROUP = "cellgate.test_entry_points_read_once"


def plugin(folder: Path, name: str, value: str) -> Path:
    """A distribution in ``folder`` with one entry point ``name = value`` in the group; its entry_points.txt."""
    info = folder / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{name} = {value}\n")
    return info / "entry_points.txt"


def named(found: tuple[object, ...]) -> list[tuple[str, str]]:
    return [(e.name, e.value) for e in found]  # type: ignore[attr-defined]


def test_a_group_is_read_once_and_a_distribution_put_on_the_path_later_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A group with an entry point (an empty answer would be the one empty tuple whether read again or not).
    listed = plugin(tmp_path / "first", "firstplugin", "json:dumps")
    monkeypatch.syspath_prepend(str(tmp_path / "first"))
    before = entry_points(GROUP)
    assert named(before) == [("firstplugin", "json:dumps")]
    # Not read again: the metadata changed on disk and the same answer (the same tuple) comes back.
    listed.write_text(f"[{GROUP}]\nfirstplugin = json:loads\n")
    assert entry_points(GROUP) is before and named(entry_points(GROUP)) == [("firstplugin", "json:dumps")]
    # A distribution put on sys.path later is a new sys.path, read anew.
    plugin(tmp_path / "late", "lateplugin", "json:dumps")
    with monkeypatch.context() as later:
        later.syspath_prepend(str(tmp_path / "late"))
        assert sorted(named(entry_points(GROUP))) == [("firstplugin", "json:loads"), ("lateplugin", "json:dumps")]
    assert entry_points(GROUP) is before  # the earlier sys.path's answer, kept
