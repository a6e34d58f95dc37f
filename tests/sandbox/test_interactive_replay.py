"""`cellgate replay --interactive` as a person uses it from an attached client (issue 15, item 6): calls identical
to recorded ones get the recorded answers, new calls are refused with how to go live, what a console sends on its
own is not a cell, `exit` ends the replay, and a long cell can be interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import CELLGATE, COUNTED_TOOLS, interactive_replay
from conftest import cellgate as run_cellgate
from jupyter_client import BlockingKernelClient

from cellgate.gate.audit.recorder import journal_path

# The second cell fails after its charge: the cell replay stops at made a call.
CELLS = ["rows = tools.ledger(300)", "receipt = tools.charge(len(rows))\nprint(rows[0]['customer'])"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, runsc: object) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("recorded")
    count = folder / "count"
    programs = []
    for index, source in enumerate(CELLS):
        programs.append(folder / f"c{index}.py")
        programs[-1].write_text(source)
    notebook = folder / "run.ipynb"
    done = run_cellgate("exec", *map(str, programs), "--tools", str(COUNTED_TOOLS), "--notebook", str(notebook),
                        env={"CELLGATE_TEST_COUNT_FILE": str(count)})
    assert done.returncode == 1 and "KeyError: 'customer'" in done.stderr, done.stderr
    assert count.read_text().splitlines() == ["ledger", "300"]
    return notebook, count


def start(notebook: Path, count: Path, output: Path) -> subprocess.Popen[str]:
    count.write_text("")
    return subprocess.Popen([*CELLGATE, "replay", str(notebook), "--interactive", "--notebook", str(output)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CELLGATE_TEST_COUNT_FILE": str(count)})


FIX = "print(tools.charge(300), tools.charge(300), len(tools.ledger(300)))"


def test_identical_calls_get_recorded_answers_new_ones_are_refused_and_exit_ends_the_replay(
        recorded: tuple[Path, Path], tmp_path: Path) -> None:
    """The real `jupyter console --existing` (driven without a terminal, as test_claims_console does)."""
    notebook, count = recorded
    output = tmp_path / "attached.ipynb"
    with start(notebook, count, output) as replay, interactive_replay(replay) as run:
        # The failed cell's own charge, twice, and cell 1's ledger: from the recording. Then a new call, the
        # console's `clear`, and `exit`.
        typed = [FIX, "tools.charge(301)", "clear", "exit"]
        console = [str(Path(sys.executable).with_name("jupyter-console")), "--existing",
                   run.client.connection_file, "--simple-prompt"]
        done = subprocess.run(console, input="\n".join(typed) + "\n", capture_output=True, text=True, timeout=300,
                              check=False)
        assert done.returncode == 0 and "Shutting down kernel" in done.stdout, done.stdout + done.stderr
        assert "charged 300 charged 300 300\n" in done.stdout, done.stdout
        assert "ReplayDivergence" in done.stderr + done.stdout, done.stdout + done.stderr
        assert "never made this call, so it was not run" in done.stderr + done.stdout
        assert "`--live charge --tools MODULE.py`" in done.stderr + done.stdout
        assert replay.wait(120) == 0  # on its own: no Ctrl-C
        assert "the kernel exited" in run.said("replay ended")
    assert count.read_text() == ""  # no tool ran
    nb = nbformat.read(output, as_version=4)
    # The replayed cells, then what was typed. The console's own requests (kernel_info, is_complete, ...) are
    # no cells; `clear` and `exit` are: the kernel ran them (see the README).
    assert [c.source for c in nb.cells] == [*CELLS, *typed]
    calls = nb.cells[len(CELLS)].metadata.cellgate.calls
    assert [(c["tool"], c["decision"], c["ok"]) for c in calls] == [("charge", "replayed", True)] * 2 + [
        ("ledger", "replayed", True)]
    refused = nb.cells[len(CELLS) + 1].metadata.cellgate
    assert refused.status == "error" and refused.error["ename"] == "ReplayDivergence"
    # `exit` sent a shutdown_request: the kernel's exit was expected, neither a death nor a memory event.
    events = [json.loads(line).get("event") for line in journal_path(output).read_text().splitlines()]
    assert "kernel-exited" in events and "kernel-died" not in events and "memory-limit-hit" not in events, events


def started(client: BlockingKernelClient, msg_id: str) -> None:
    """Wait until the cell ``msg_id`` printed its first line: it is running in the kernel."""
    while True:
        message = client.get_iopub_msg(timeout=60)
        if message["parent_header"].get("msg_id") == msg_id and message["msg_type"] == "stream":
            return


def test_ctrl_c_in_the_replay_s_terminal_interrupts_a_long_cell_of_the_attached_session(
        recorded: tuple[Path, Path], tmp_path: Path) -> None:
    notebook, count = recorded
    with start(notebook, count, tmp_path / "interrupted.ipynb") as replay:
        with interactive_replay(replay) as run:
            client = run.client
            # `jupyter console --existing` cannot interrupt (it has no kernel manager): Ctrl-C where replay runs can.
            msg_id = client.execute("import time\nprint('started', flush=True)\ntime.sleep(600)")
            started(client, msg_id)
            replay.send_signal(signal.SIGINT)  # what the terminal sends its foreground process on Ctrl-C
            reply = client.get_shell_msg(timeout=60)
            assert reply["parent_header"]["msg_id"] == msg_id
            assert reply["content"]["ename"] == "KeyboardInterrupt", reply
            assert "interrupted the running cell" in run.said("interrupted")
            # A frontend whose kernel manager interrupts by message (the kernelspec's interrupt_mode) works too.
            msg_id = client.execute("print('started', flush=True)\ntime.sleep(600)")
            started(client, msg_id)
            client.control_channel.send(client.session.msg("interrupt_request", {}))
            reply = client.get_shell_msg(timeout=60)
            assert reply["parent_header"]["msg_id"] == msg_id
            assert reply["content"]["ename"] == "KeyboardInterrupt", reply
            content, out = run("print('still here')")  # the kernel survives both
            assert content["status"] == "ok" and out == "still here\n", (content, out)
        # The helper's Ctrl-C, with no cell running, ended the replay (and it exited 0).
        assert "replay ended (Ctrl-C)" in run.said("replay ended")


def test_ctrl_d_in_the_console_detaches_and_the_kernel_stays(recorded: tuple[Path, Path], tmp_path: Path) -> None:
    """README: "Ctrl-D only detaches, leaving the kernel for you to attach again". The console reads its end of
    input (what Ctrl-D is to it: EOFError), confirms with its default, and leaves; the replay and its kernel go on."""
    notebook, count = recorded
    output = tmp_path / "detached.ipynb"
    with start(notebook, count, output) as replay:
        with interactive_replay(replay) as run:
            console = [str(Path(sys.executable).with_name("jupyter-console")), "--existing",
                       run.client.connection_file, "--simple-prompt"]
            done = subprocess.run(console, input="kept = 41\n", capture_output=True, text=True, timeout=300,
                                  check=False)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "keeping kernel alive" in done.stdout and "Shutting down kernel" not in done.stdout, done.stdout
            assert replay.poll() is None  # the replay did not end
            content, out = run("print(kept + 1)")  # the same kernel, attached again: what the console left is there
            assert content["status"] == "ok" and out == "42\n", (content, out)
        assert "replay ended (Ctrl-C)" in run.said("replay ended")  # ended by the helper, not by the detach
    nb = nbformat.read(output, as_version=4)
    assert [c.source for c in nb.cells] == [*CELLS, "kept = 41", "print(kept + 1)"]
