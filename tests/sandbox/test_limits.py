"""Limits in the real sandbox: memory, wall-clock timeout, and a loop that ignores SIGINT."""

from __future__ import annotations

import json
import os

import nbformat
import pytest

from cellgate.gate.review.show_json import json_view
from cellgate.gate.sandbox.local import enforcement

# CPU or wall time counts here: never beside another such test (tests/conftest.py, the xdist groups).
pytestmark = pytest.mark.xdist_group("cpu")


@pytest.fixture(scope="module")
def limited(session_factory):
    return session_factory(memory_mb=1024, cell_timeout=3.0, interrupt_grace=2.0)


def notebook_cells(box) -> list[dict]:
    return nbformat.read(box.session.notebook_path, as_version=4)["cells"]


def test_over_allocation_is_a_memory_error_and_state_survives(limited) -> None:
    assert limited.execute("kept = 'still here'").ok
    result = limited.execute("block = bytearray(2 << 30)")
    assert result.status == "error" and result.error["ename"] == "MemoryError"
    assert limited.execute("print(kept)").stdout == "still here\n"


def test_infinite_loop_past_the_timeout_is_interrupted_and_recorded(limited) -> None:
    assert limited.execute("survivor = 7").ok
    result = limited.execute("while True:\n    pass")
    assert result.status == "timeout"
    assert result.limits_hit == ["timeout"]
    assert result.error["ename"] == "KeyboardInterrupt"
    cell = notebook_cells(limited)[-1]
    assert cell["source"] == "while True:\n    pass"
    assert cell["metadata"]["cellgate"]["status"] == "timeout"
    assert limited.execute("print(survivor)").stdout == "7\n"


def test_loop_ignoring_sigint_is_killed_reported_and_session_restarts(session_factory) -> None:
    box = session_factory(cell_timeout=2.0, interrupt_grace=1.5)
    assert box.execute("doomed = 1").ok
    result = box.execute(
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "while True:\n    try:\n        pass\n    except BaseException:\n        pass")
    assert result.status == "killed"
    assert "timeout" in result.limits_hit
    assert box.session.dead
    cell = notebook_cells(box)[-1]["metadata"]["cellgate"]
    assert cell["status"] == "killed"
    journal = box.session.notebook_path.with_name(box.session.notebook_path.stem + ".journal.jsonl")
    events = [json.loads(line)["event"] for line in journal.read_text().splitlines()]
    assert "cell-kill" in events
    box.restart()
    after = box.execute("print('fresh', 'doomed' in globals())")
    assert after.stdout == "fresh False\n"


def test_kernel_death_mid_cell_keeps_partial_output_and_is_its_own_status(session_factory) -> None:
    box = session_factory()
    # The gated call is a barrier: IOPub is one ordered stream, so once the host has answered the
    # call it has read the output printed before it.
    result = box.execute("import os\nprint('partial', flush=True)\ntools.echo('barrier')\nos.kill(os.getpid(), 9)")
    assert result.status == "kernel-died"
    assert "partial" in result.stdout
    assert "kernel-died" in result.limits_hit
    cell = notebook_cells(box)[-1]
    assert cell.metadata.cellgate.status == "kernel-died" and cell.outputs[0]["text"].startswith("partial")
    box.restart()
    assert box.execute("print('back')").stdout == "back\n"


@pytest.fixture
def memory_cgroup() -> None:
    """The sandbox's memory cgroup: runsc's as root; without root, a child of a delegated one (``cgroups``)."""
    if os.geteuid() != 0 and enforcement.delegated(None) is None:
        pytest.skip("needs root or a delegated cgroup (README: What an ordinary user gets)")


@pytest.mark.usefixtures("memory_cgroup")
def test_the_cgroup_backstop_is_reported_as_memory_and_the_session_restarts_itself(session_factory) -> None:
    box = session_factory(memory_mb=512, cell_timeout=60.0)
    assert box.execute("orders = [1, 2, 3]\ntotal = 6").ok
    # Forked copies of the kernel are each under its address-space cap; together they pass the sandbox's
    # memory limit, and the host's cgroup OOM-kills the sandbox.
    hog = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    result = box.execute(hog)
    assert result.status == "memory" and result.limits_hit == ["memory"]
    assert result.error["ename"] == "SandboxMemoryLimit" and "512 MB memory limit" in result.error["evalue"]
    assert not box.session.dead  # restarted by the session, no call needed
    assert box.execute("print('fresh', 'orders' in globals())").stdout == "fresh False\n"
    cells = notebook_cells(box)
    note = next(c for c in cells if c["metadata"].get("cellgate", {}).get("kind") == "kernel-restarted")
    assert note["source"] == ("**The kernel was restarted after the sandbox reached its memory limit.** "
                              "These variables are gone: `orders`, `total`.")
    assert note["metadata"]["cellgate"]["variables_gone"] == ["orders", "total"]
    shown = json_view(box.session.notebook_path)  # what `cellgate show --json` reports of the memory restart
    assert shown["restarts"] == [{"after_cell": 2, "reason": "memory", "variables_gone": ["orders", "total"]}]
