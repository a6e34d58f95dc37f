"""README claims about approvers: `prompt` asks on the terminal and acts on the answer, `allow` allows, and a
queued request answered twice runs its tool once while the second answer fails clearly (issue 21)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pexpect
import pytest
from conftest import CELLGATE, cellgate

from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.gvisor

COUNTED = Path(__file__).resolve().parent.parent / "tools" / "counted.py"
PROGRAM = """print(tools.charge(11))
try:
    tools.charge(22)
except tools.ToolDenied as exc:
    print("denied:", type(exc).__name__)
"""



def write_config(folder: Path, approver: str) -> Path:
    config = folder / "cellgate.toml"
    config.write_text(f"""
[tools]
modules = [{json.dumps(str(COUNTED))}]
[policy]
default = "deny"
approver = "{approver}"
[policy.tools.charge]
decision = "approve"
""")
    return config


def charges(count: Path) -> list[str]:
    return count.read_text().splitlines() if count.exists() else []


def recorded_calls(notebook: Path) -> list[dict[str, Any]]:
    nb = nbformat.read(notebook, as_version=4)
    return [call for cell in nb.cells if cell.cell_type == "code" for call in cell.metadata.cellgate.calls]


def test_prompt_asks_on_the_terminal_and_acts_on_each_answer(tmp_path: Path, runsc: object) -> None:
    config = write_config(tmp_path, "prompt")
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    count, notebook = tmp_path / "count", tmp_path / "run.ipynb"
    env = {**os.environ, "CELLGATE_TEST_COUNT_FILE": str(count), "COLUMNS": "200"}
    # A real terminal (a pty as the controlling tty), as a person at `cellgate exec` would have.
    child = pexpect.spawn(CELLGATE[0], [*CELLGATE[1:], "exec", str(program), "--config", str(config),
                                        "--notebook", str(notebook)],
                          env=env, cwd=str(tmp_path), encoding="utf-8", timeout=240, dimensions=(50, 200))
    try:
        child.expect_exact("allow this call? [y/N] ")
        first = child.before
        assert "approval needed" in first and "charge" in first and "11" in first, first
        assert charges(count) == []  # nothing runs before the answer
        child.sendline("y")
        child.expect_exact("allow this call? [y/N] ")
        second = child.before
        assert "charge" in second and "22" in second, second
        child.sendline("n")
        child.expect(pexpect.EOF)
        rest = child.before
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, rest
    assert "charged 11" in rest and "denied: ToolDenied" in rest, rest
    assert charges(count) == ["11"]
    calls = recorded_calls(notebook)
    assert [(c["args"], c["decision"]) for c in calls] == [({"amount": 11}, "approved"),
                                                          ({"amount": 22}, "approval-denied")]
    assert [c["approval"]["approver"] for c in calls] == ["prompt", "prompt"]


def test_allow_approves_without_asking(tmp_path: Path, runsc: object) -> None:
    config = write_config(tmp_path, "allow")
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    count, notebook = tmp_path / "count", tmp_path / "run.ipynb"
    # No terminal at all: an approver that asked would fail here rather than allow.
    done = cellgate("exec", str(program), "--config", str(config), "--notebook", str(notebook), timeout=240,
                    stdin="", cwd=tmp_path, env={"CELLGATE_TEST_COUNT_FILE": str(count)},
                    start_new_session=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "charged 11\n", done.stdout
    assert charges(count) == ["11", "22"]
    calls = recorded_calls(notebook)
    assert [(c["decision"], c["approval"]["approver"]) for c in calls] == [("approved", "allow")] * 2


# ---------------------------------------------------------------- the queue, answered twice

@pytest.fixture()
def queued(tmp_path: Path, runsc: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[BlockingSession, Path]]:
    approvals = tmp_path / "approvals"
    monkeypatch.setenv("CELLGATE_APPROVALS_DIR", str(approvals))
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(tmp_path / "count"))
    box = BlockingSession(config=write_config(tmp_path, "queue"), notebook=tmp_path / "run.ipynb",
                          cwd=tmp_path).start()
    try:
        yield box, approvals
    finally:
        box.close()


def wait_for(condition: Callable[[], Any], what: str, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := condition()):
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.05)
    return value


def pending_id(approvals: Path) -> str:
    (path,) = wait_for(lambda: list(approvals.glob("*.request.json")), "the approval request", 120)
    return path.name.removesuffix(".request.json")


def test_a_request_answered_twice_runs_once_and_the_second_answer_fails(queued: tuple[BlockingSession, Path],
                                                                        tmp_path: Path) -> None:
    box, approvals = queued
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(box.execute, "print(tools.charge(33))")
        request_id = pending_id(approvals)
        first = cellgate("approvals", "approve", request_id)
        assert first.returncode == 0, first.stderr
        result = pending.result(120)
    assert result.status == "ok" and result.stdout == "charged 33\n"
    for verb in ("approve", "deny"):
        again = cellgate("approvals", verb, request_id)
        assert again.returncode != 0, (verb, again.stdout)
        assert request_id in again.stderr and "Traceback" not in again.stderr, again.stderr
    assert charges(tmp_path / "count") == ["33"]
    assert [c["decision"] for c in recorded_calls(box.session.notebook_path)] == ["approved"]


def test_a_second_answer_before_the_first_is_read_fails_and_the_first_counts(
        queued: tuple[BlockingSession, Path], tmp_path: Path) -> None:
    box, approvals = queued
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(box.execute, "print(tools.charge(44))")
        request_id = pending_id(approvals)
        # Hold the gate's event loop (where the queue approver polls) so no answer is read until both are given.
        service = box.session.provisioner.service
        assert service is not None and service.loop is not None
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(120)

        service.loop.call_soon_threadsafe(hold)
        assert held.wait(60)
        try:
            first = cellgate("approvals", "approve", request_id)
            second = cellgate("approvals", "deny", request_id)
        finally:
            release.set()
        result = pending.result(120)
    assert first.returncode == 0, first.stderr
    assert second.returncode != 0 and request_id in second.stderr, second.stdout + second.stderr
    assert result.status == "ok" and result.stdout == "charged 44\n"
    assert charges(tmp_path / "count") == ["44"]
