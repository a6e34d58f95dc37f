"""The lineage ledger (calls/lineage): counts shared by every member, shares never larger, taken atomically."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from cellgate.gate.ext import BudgetRefused, Lineage


def test_members_draw_on_one_count() -> None:
    parent = Lineage.new()
    fork = parent.share(None, 3)
    assert parent.take("session", 3) == 1
    assert fork.take("session", 3) == 2
    assert Lineage(parent.id).take("session", 3) == 3  # another process names it by id
    with pytest.raises(BudgetRefused, match="budget of 3 calls is used up"):
        fork.take("session", 3)
    assert parent.held() == {"session": 3}


def test_a_share_is_never_larger_and_is_kept() -> None:
    parent = Lineage.new()
    parent.take("session", 5)
    with pytest.raises(ValueError, match="more than its parent has left"):
        parent.share(5, 5)
    small = parent.share(1, 5)
    assert small.left(5) == 1
    small.take("session", 5)
    with pytest.raises(BudgetRefused, match="share"):
        small.take("session", 5)
    assert parent.take("session", 5) == 3  # the parent's own calls are not the fork's share
    with pytest.raises(ValueError, match="more than its parent has left"):
        small.share(1, 5)  # a fork of a fork: what its parent's share has left


def test_take_all_counts_all_or_none() -> None:
    lineage = Lineage.new()
    lineage.take("tool:a", 1)
    with pytest.raises(BudgetRefused):
        lineage.take_all([("session", 10, "per-session"), ("tool:a", 1, "'a' per-session")])
    assert lineage.held() == {"tool:a": 1}


def _spend(lineage_id: str, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    took = 0
    for _ in range(50):
        try:
            Lineage(lineage_id).take("session", 60)
            took += 1
        except BudgetRefused:
            pass
    queue.put(took)


def test_processes_never_spend_past_the_limit() -> None:
    lineage = Lineage.new()
    queue: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    procs = [multiprocessing.get_context("fork").Process(target=_spend, args=(lineage.id, queue)) for _ in range(3)]
    for proc in procs:
        proc.start()
    total = sum(queue.get(timeout=60) for _ in procs)
    for proc in procs:
        proc.join()
    assert total == 60 and lineage.held() == {"session": 60}


def test_a_planted_link_is_not_followed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lineage = Lineage.new()
    target = tmp_path / "outside"
    target.write_text("unchanged")
    lineage.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.symlink(target, lineage.path)
    with pytest.raises(OSError):
        lineage.take("session", 3)
    assert target.read_text() == "unchanged"


def test_ids_are_checked() -> None:
    with pytest.raises(ValueError):
        Lineage("../../etc")
    assert Lineage.from_record(Lineage("a" * 32).record()) == Lineage("a" * 32)
    assert Lineage.from_record(None) is None
