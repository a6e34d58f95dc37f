"""The lineage ledger's exact counts, refusals and shares: assertions that kill mutants of calls/lineage.py the
behaviour tests let through (scripts/mutation lineage; CONTRIBUTING, "Mutation testing")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cellgate.gate._hostkey import default_path
from cellgate.gate.calls.lineage import SHARE, BudgetRefused, Lineage, _open_private, folder


def test_folder_is_beside_the_host_key() -> None:
    assert folder() == default_path().parent / "lineages"


def test_take_all_counts_and_refuses_exactly() -> None:
    line = Lineage.new()
    assert line.take_all([("session", 2, "per-session"), ("tool:t", None, "t")]) == {"session": 1, "tool:t": 1}
    assert line.take("session", 2) == 2
    with pytest.raises(BudgetRefused) as refused:
        line.take_all([("tool:t", None, "t"), ("session", 2, "per-session")])
    assert (refused.value.name, refused.value.limit, refused.value.count, refused.value.what,
            refused.value.lineage) == ("session", 2, 2, "per-session", line.id)
    assert str(refused.value) == (f"per-session budget of 2 calls is used up (2 made, across lineage {line.id}: "
                                  "this session, its forks, trials and resumed sessions)")
    assert line.held() == {"session": 2, "tool:t": 1}  # all or none: tool:t not counted
    with pytest.raises(BudgetRefused) as named:
        line.take("session", 2)
    assert named.value.what == "session"  # what defaults to the name


def test_shares_cap_and_count_exactly() -> None:
    parent = Lineage.new()
    assert parent.left(None) is None
    assert parent.left(5) == 5
    parent.take(SHARE, 5)
    assert parent.left(5) == 4
    assert parent.share(None, 5) is parent
    with pytest.raises(ValueError, match=r"more than its parent has left \(4 of lineage"):
        parent.share(5, 5)
    with pytest.raises(ValueError, match="must be 0 or more calls, got -1"):
        parent.share(-1, 5)
    child = parent.share(4, 5)  # exactly what is left: allowed
    assert child.id == parent.id and len(child.shares) == 1
    assert child.left(None) == 4
    assert child.left(100) == 4
    child.take(SHARE, None)
    assert child.left(None) == 3
    assert parent.left(5) == 3
    grandchild = child.share(1, None)
    assert grandchild.shares[0] == child.shares[0] and len(grandchild.shares) == 2
    grandchild.take(SHARE, None)
    assert grandchild.left(None) == 0
    with pytest.raises(BudgetRefused) as refused:
        grandchild.take(SHARE, None, "per-session")
    assert (refused.value.limit, refused.value.count, refused.value.what) == (1, 1, "this fork's share of the per-session")
    assert child.left(None) == 2  # the grandchild's calls counted against its parent's share too
    zero = parent.share(0, 5)
    assert zero.left(None) == 0
    assert Lineage(parent.id, ("ab" * 8,)).left(None) == 0  # an unknown member has no share
    other = child.take("tool:t", None)  # names other than the share do not spend shares
    assert other == 1 and child.left(None) == 2


def test_raise_to_and_records() -> None:
    line = Lineage.new()
    line.take("session", None)
    line.raise_to({"session": 5, "tool:x": 2})
    line.raise_to({"session": 3})
    assert line.held() == {"session": 5, "tool:x": 2}
    assert line.record() == {"id": line.id, "shares": []}
    member = line.share(1, None)
    assert Lineage.from_record(member.record()) == member
    assert Lineage.from_record({"id": line.id}) == Lineage(line.id)
    assert Lineage.from_record({"id": 5}) is None
    assert Lineage.from_record("x") is None
    with pytest.raises(ValueError, match="not a lineage id"):
        Lineage("nothex")
    with pytest.raises(ValueError, match="not a lineage id"):
        Lineage("a" * 16, ("bad",))
    assert len(Lineage.new().id) == 32


def test_open_private_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError, match="is not a regular file of this user"):
        _open_private(tmp_path / "d", os.O_RDONLY)
    (tmp_path / "f").write_text("x")
    os.symlink(tmp_path / "f", tmp_path / "link")
    with pytest.raises(OSError):
        _open_private(tmp_path / "link", os.O_RDONLY)
    fd = _open_private(tmp_path / "new", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o600


def test_a_ledger_without_its_keys_reads_as_empty() -> None:
    # A ledger left by an older gate or edited by hand, holding neither "held" nor "shares": counts start at 0.
    line = Lineage.new()
    line.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(line.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"{}")
    os.close(fd)
    assert line.held() == {}
    assert line.left(3) == 3
    member = Lineage(line.id, ("cd" * 8,))
    assert member.left(None) == 0  # a member the ledger has no share for may make none
    with pytest.raises(BudgetRefused) as refused:
        member.take(SHARE, None, "per-session")
    assert (refused.value.name, refused.value.limit, refused.value.count, refused.value.lineage) == \
        (SHARE, 0, 0, line.id)
    line.raise_to({"session": 2})
    assert line.held() == {"session": 2}
    fd = os.open(line.path, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"{}")
    os.close(fd)
    assert line.take("tool:t", None) == 1
    fd = os.open(line.path, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"{}")
    os.close(fd)
    child = line.share(1, None)
    assert len(child.shares[0]) == 16
    assert child.left(None) == 1
    fd = os.open(line.path, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b'{"held": {"session": 1}}')
    os.close(fd)
    assert line.take("session", None) == 2
