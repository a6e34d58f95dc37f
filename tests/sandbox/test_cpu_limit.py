"""``[sandbox] cpus``: a CPU quota on the whole sandbox (issue 32, item 6), measured by the cgroup's own accounting;
and ``[sandbox] sandboxes_cpu_weight``: every sandbox under one parent cgroup weighed lightly against the gate
(issue 33), read from the cgroups the sandbox's processes are in.

A cell spins on more processes than the machine has cores; the share of one core it got is the sandbox cgroup's
CPU time over the wall time of the cell. Under ``cpus = 0.5`` it is about half a core; the same cell without a
quota gets far more (the control, so the bound can fail), and the record states the quota that bound it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.sandbox.local import cpu_weight

pytestmark = [pytest.mark.gvisor, pytest.mark.xdist_group("cpu"),
              pytest.mark.root_only]  # runsc sets a cgroup's CPU quota only as root (an ordinary user is refused)

SECONDS = 4
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


def sandbox_of(box: Any) -> dict[str, Any]:
    """The running sandbox as the journal describes it (its id, limits and how each is enforced)."""
    journal = box.session.notebook_path.with_suffix(".journal.jsonl")
    attached = [r for r in map(json.loads, journal.read_text().splitlines()) if r["event"] == "kernel-attached"]
    return dict(attached[-1]["sandbox"])


def share_of_a_core(box: Any) -> float:
    """CPU seconds the sandbox's cgroup used while the spinning cell ran, per second of its wall time."""
    cpu = CpuSource(sandbox_of(box)["id"], None)
    used, began = cpu.seconds(), time.monotonic()
    assert used is not None, "the sandbox's cgroup CPU time cannot be read"
    result = box.execute(SPIN, timeout=120)
    wall, after = time.monotonic() - began, cpu.seconds()
    assert result.status == "ok" and result.stdout == "spun\n", (result.status, result.stdout, result.stderr)
    assert after is not None
    return (after - used) / wall


def test_half_a_cpu_binds_a_cell_spinning_on_every_core_and_the_record_says_so(session_factory: Any) -> None:
    unbound = share_of_a_core(session_factory())
    assert unbound > 0.8, unbound  # the control: three spinners on this machine's cores get more than one core

    box = session_factory(cpus=0.5)
    bound = share_of_a_core(box)
    assert bound < 0.65, bound  # half a core, and a little of gVisor's own at the period's edges

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
