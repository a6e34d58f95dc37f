"""The one owner record (``sandbox.liveness``): what its readers (leftovers, kubernetes, approvals) are told."""

from __future__ import annotations

import subprocess
import sys

from cellgate.gate.sandbox.liveness import owner_alive, owner_state, process_record, this_process


def test_this_process_is_alive_and_a_process_that_ended_is_gone() -> None:
    assert owner_state(this_process()) == "alive" and owner_alive(this_process())
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    record = process_record(child.pid)
    assert owner_state(record) == "alive"
    child.communicate(b"")
    assert owner_state(record) == "gone" and not owner_alive(record)


def test_a_reused_pid_is_gone_and_who_cannot_be_told_is_unknown() -> None:
    mine = this_process()
    assert owner_state({**mine, "start_time": "1"}) == "gone"  # the pid now names another process
    assert owner_state({key: mine[key] for key in ("pid", "start_time")}) == "alive"  # a record of before "host"
    assert owner_state({**mine, "host": "another-node"}) == "unknown"  # another host's process: never "gone"
    for broken in ({}, {"pid": "1", "start_time": "1"}, {"pid": True, "start_time": "1"}, {"pid": mine["pid"]},
                   {"pid": mine["pid"], "start": mine["start_time"]}):
        assert owner_state(broken) == "unknown" and not owner_alive(broken)
