"""``[sandbox] cpus``: a CPU quota on the whole sandbox (issue 32, item 6), measured by the cgroup's own accounting;
and ``[sandbox] sandboxes_cpu_weight``: every sandbox under one parent cgroup weighed lightly against the gate
(issue 33), read from the cgroups the sandbox's processes are in.

A cell spins on more processes than the machine has cores. The host's other processes must not decide the result
(issue 43, item 4: a control at 0.049 of a core on a busy host, the sandboxes weighed 32 against 1024): while a
cell spins, the test gives its sandbox (and the sandboxes' parent) the kernel's greatest CPU weight, so the
sandbox gets every core it asks for and only a quota can hold it back. Under ``cpus = 0.5`` the sandbox's cgroup
holds a quota of half its period, the kernel throttles it (``nr_throttled`` grows) and its CPU time over the
cell's wall time stays at most about half a core; the same cell without a quota has no quota and is never
throttled (the control, so each can fail); the record states the quota that bound it. No assertion needs a free
core: a busier host only keeps the sandbox further under its quota (it spins again until throttled).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.sandbox.local import cpu_weight

pytestmark = [pytest.mark.gvisor, pytest.mark.xdist_group("cpu"),
              pytest.mark.root_only]  # runsc sets a cgroup's CPU quota only as root (an ordinary user is refused)

SECONDS = 3
ROUNDS = 5
SPIN = f"""
import os, time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
children = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        spin({SECONDS})
        os._exit(0)
    children.append(pid)
spin({SECONDS})
for pid in children:
    os.waitpid(pid, 0)
print('spun')
"""
CPU = Path("/sys/fs/cgroup/cpu")
MOST_SHARES = 262144  # the kernel's greatest cpu.shares (MAX_SHARES)


def sandbox_of(box: Any) -> dict[str, Any]:
    """The running sandbox as the journal describes it (its id, limits and how each is enforced)."""
    journal = box.session.notebook_path.with_suffix(".journal.jsonl")
    attached = [r for r in map(json.loads, journal.read_text().splitlines()) if r["event"] == "kernel-attached"]
    return dict(attached[-1]["sandbox"])


def cgroup_of(box: Any) -> Path:
    """The sandbox's own cgroup in the CPU controller, as the kernel lists its processes' cgroups."""
    sandbox_id = sandbox_of(box)["id"]
    folder = CPU / cpu_weight.PARENT / sandbox_id
    pids = (folder / "cgroup.procs").read_text().split()
    assert pids, f"no process in the sandbox's cgroup {folder}"
    assert f":cpu:/{cpu_weight.PARENT}/{sandbox_id}" in Path(f"/proc/{pids[0]}/cgroup").read_text()
    return folder


def throttled(folder: Path) -> int:
    """How many of its periods the kernel held the cgroup back (``nr_throttled`` of its cpu.stat)."""
    stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
    return int(stat["nr_throttled"])


@contextmanager
def first_in_line(folder: Path) -> Iterator[None]:
    """The sandbox (and the sandboxes' parent) at the kernel's greatest CPU weight for a while: no other process
    on the host, nor another sandbox, takes the cores it asks for; the parent's weight is put back after."""
    parent = folder.parent / "cpu.shares"
    before = parent.read_text().strip()
    (folder / "cpu.shares").write_text(str(MOST_SHARES))
    parent.write_text(str(MOST_SHARES))
    try:
        yield
    finally:
        parent.write_text(before)


def spin(box: Any) -> tuple[float, int]:
    """The spinning cell, first in line for the cores: the CPU seconds the sandbox's cgroup used per second of the
    cell's wall time, and how many periods the kernel throttled it meanwhile."""
    folder = cgroup_of(box)
    cpu = CpuSource(sandbox_of(box)["id"], None)
    with first_in_line(folder):
        used, held, began = cpu.seconds(), throttled(folder), time.monotonic()
        assert used is not None, "the sandbox's cgroup CPU time cannot be read"
        result = box.execute(SPIN, timeout=120)
        wall, after, held_after = time.monotonic() - began, cpu.seconds(), throttled(folder)
    assert result.status == "ok" and result.stdout == "spun\n", (result.status, result.stdout, result.stderr)
    assert after is not None
    return (after - used) / wall, held_after - held


def quota_of(box: Any) -> float | None:
    """The CPUs the sandbox's cgroup may use per period (cfs_quota_us over cfs_period_us); None: no quota."""
    folder = cgroup_of(box)
    quota = int((folder / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota / int((folder / "cpu.cfs_period_us").read_text())


def test_half_a_cpu_binds_a_cell_spinning_on_every_core_and_the_record_says_so(session_factory: Any) -> None:
    unbound_box = session_factory()
    assert quota_of(unbound_box) is None
    _, unbound_held = spin(unbound_box)
    assert unbound_held == 0, unbound_held  # the control: no quota, and the kernel never held it back

    box = session_factory(cpus=0.5)
    assert quota_of(box) == 0.5  # the quota asked for, on the sandbox's own cgroup
    held = 0
    for _ in range(ROUNDS):  # spins until the kernel held it back by its quota: a host busier than its weight
        bound, more = spin(box)  # can keep the sandbox under its quota for a while, never over it
        assert bound < 0.65, bound  # half a core, and a little of gVisor's own at the period's edges
        held += more
        if held:
            break
    assert held > 0, f"the kernel never throttled the sandbox in {ROUNDS} spins of {SECONDS} s"

    sandbox = sandbox_of(box)
    assert sandbox["limits"]["cpus"] == 0.5
    assert sandbox["limits_enforced"]["cpu"]["enforced"] == "whole sandbox"
    assert "CPU quota of 0.5 CPUs" in sandbox["limits_enforced"]["cpu"]["by"]
    assert box.session.sandbox_info["limits"]["cpus"] == 0.5  # the notebook's metadata too


def test_every_sandbox_runs_under_one_parent_weighed_lightly_and_the_record_says_so(session_factory: Any) -> None:
    box = session_factory()
    sandbox_id = box.session.provisioner.handle.id
    parent = Path("/sys/fs/cgroup/cpu") / cpu_weight.PARENT
    assert (parent / "cpu.shares").read_text().strip() == str(round(1024 / 32))  # the default: 1/32 of a process
    pid = box.execute("import os\nprint(os.getpid())")  # the kernel runs, inside: its host processes are runsc's
    assert pid.status == "ok"
    inside = (parent / sandbox_id / "cgroup.procs").read_text().split()
    assert inside, f"no process in the sandbox's cgroup {parent / sandbox_id}"
    for host_pid in inside:  # the sentry and the gofer: under the parent, in the sandbox's own cgroup
        assert f":cpu:/{cpu_weight.PARENT}/{sandbox_id}" in Path(f"/proc/{host_pid}/cgroup").read_text()
    assert box.session.sandbox_info["sandboxes_cpu_weight"] == f"32 in {parent / 'cpu.shares'}"  # the record's
