"""Writes you can trust: after a failure the caller knows which writes happened, and a retry never repeats them.

The tools write to a file on the host (the world): each ``create_task`` appends a line, ``list_tasks`` reads
them. A cell loops over 10 writes and fails at the 8th; the caller is told the 7 committed writes with their
arguments; a retry of the fixed cell makes exactly the 3 missing ones; a plain re-run repeats every write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import cellgate
from jupyter_client import KernelManager

from cellgate.gate import Session, SessionError
from cellgate.gate.audit.recorder import journal_path
from cellgate.gate.audit.verify import check_run
from cellgate.gate.calls.retry import KEY_PREFIX
from cellgate.gate.calls.writes import Writes

pytestmark = pytest.mark.gvisor

TOOLS = '''
import json, os, threading
from cellgate.gate import Tool

WORLD = os.environ["CELLGATE_TEST_WORLD"]
STOP = threading.Event()


def _tasks():
    try:
        with open(WORLD) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


def create_task(title: str) -> dict:
    """Create a task (a write)."""
    with open(WORLD, "a") as f:
        task = {"id": f"T-{len(_tasks()) + 1}", "title": title}
        f.write(json.dumps(task) + "\\n")
    return task


@Tool.with_effect("read")
def list_tasks() -> list:
    """The tasks that exist."""
    return [t["title"] for t in _tasks()]


def slow_write(title: str) -> str:
    """A write that outlives its deadline the first time (it does happen)."""
    with open(WORLD, "a") as f:
        f.write(json.dumps({"id": "slow", "title": title}) + "\\n")
    if not os.path.exists(WORLD + ".fast"):
        STOP.wait(30)
    return "done"


def keyed_write(title: str, *, idempotency_key: str) -> str:
    """A write that takes an idempotency key and outlives its deadline the first time."""
    with open(WORLD, "a") as f:
        f.write(json.dumps({"id": "keyed", "title": title, "key": idempotency_key}) + "\\n")
    if not os.path.exists(WORLD + ".fast"):
        STOP.wait(30)
    return "done"
'''

LOOP = '''
made = []
for i in range(10):
    if i == 7 and BROKEN:
        raise RuntimeError("the 8th task's title could not be built")
    made.append(tools.create_task(title=f"task {i}"))
print(len(made), "made;", len(tools.list_tasks()), "exist")
'''


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "world.jsonl"
    monkeypatch.setenv("CELLGATE_TEST_WORLD", str(path))
    (tmp_path / "tasks.py").write_text(TOOLS)
    (tmp_path / "cellgate.toml").write_text("[sandbox]\ncall_timeout = 2\n")
    return path


def lines(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_failed_loop_reports_its_writes_and_a_retry_makes_only_the_missing_ones(
        tmp_path: Path, world: Path, runsc: object) -> None:
    async def scenario() -> None:
        notebook = tmp_path / "run.ipynb"
        async with Session(config=str(tmp_path / "cellgate.toml"), tools=[str(tmp_path / "tasks.py")],
                           notebook=notebook) as session:
            with pytest.raises(SessionError, match="nothing to retry"):
                await session.execute("1", retry=True)
            failed = await session.execute("BROKEN = True\n" + LOOP)
            assert failed.status == "error"
            assert [w.args for w in failed.writes.committed] == [{"title": f"task {i}"} for i in range(7)]
            assert [w.result_id for w in failed.writes.committed] == [f"T-{i}" for i in range(1, 8)]
            assert not failed.writes.failed and not failed.writes.unknown
            summary = failed.writes.summary(failed_cell=True)
            assert "7 committed" in summary and "task 6" in summary and "retry=True" in summary
            assert len(lines(world)) == 7

            retried = await session.execute("BROKEN = False\n" + LOOP, retry=True)
            assert retried.ok, retried.text
            # Exactly the 3 missing writes ran; the read in the retry saw the live state (10 tasks).
            assert [t["title"] for t in lines(world)] == [f"task {i}" for i in range(10)]
            assert retried.stdout == "10 made; 10 exist\n"
            assert len(retried.writes.answered) == 7 and len(retried.writes.committed) == 3
            assert [w.answered_from for w in retried.writes.answered] == [c.seq for c in failed.calls]
            assert retried.writes.reads == 1

            # A plain re-run is the caller's choice: every write again.
            again = await session.execute("BROKEN = False\n" + LOOP)
            assert again.ok and len(again.writes.committed) == 10 and not again.writes.answered
            assert len(lines(world)) == 20
            # A retry after a success is refused: there is nothing to retry.
            with pytest.raises(SessionError, match="nothing to retry"):
                await session.execute(LOOP, retry=True)
        journal = [json.loads(line) for line in journal_path(notebook).read_text().splitlines()]
        sent = [r for r in journal if r["event"] == "cell-sent" and "BROKEN" in r["source"]]
        assert sent[1].get("retry_of") == sent[0]["msg_id"] and "retry_of" not in sent[2]
        finished = [r["call"] for r in journal if r["event"] == "call-finished"]
        keys = [c["idempotency_key"] for c in finished]
        assert all(key.startswith(KEY_PREFIX) for key in keys)
        # The same call has the same key in the retry; the plain re-run's are its own.
        first, retry_calls, rerun = finished[:7], finished[7:18], finished[18:]
        assert [c["idempotency_key"] for c in retry_calls[:7]] == [c["idempotency_key"] for c in first]
        assert not {c["idempotency_key"] for c in rerun} & set(keys[:18])
        assert [c["effect"] for c in retry_calls] == ["write"] * 10 + ["read"]

    asyncio.run(scenario())


def test_a_write_that_outlives_its_deadline_reruns_only_under_its_key(
        tmp_path: Path, world: Path, runsc: object) -> None:
    async def scenario() -> None:
        async with Session(config=str(tmp_path / "cellgate.toml"), tools=[str(tmp_path / "tasks.py")],
                           notebook=tmp_path / "run.ipynb") as session:
            first = await session.execute("tools.keyed_write(title='a')\ntools.slow_write(title='b')")
            assert first.status == "error"
            (unknown,) = first.writes.unknown
            assert unknown.tool == "keyed_write"
            Path(str(world) + ".fast").touch()
            # The keyed write runs again, with the same key (the API deduplicates by it); the next write is new.
            second = await session.execute("tools.keyed_write(title='a')\ntools.slow_write(title='b')", retry=True)
            assert second.ok, second.text
            assert [w.tool for w in second.writes.committed] == ["keyed_write", "slow_write"]
        keyed = [t for t in lines(world) if t["id"] == "keyed"]
        assert len(keyed) == 2 and keyed[0]["key"] == keyed[1]["key"] and keyed[0]["key"].startswith(KEY_PREFIX)

    asyncio.run(scenario())


def test_an_unkeyed_write_of_unknown_outcome_raises_outcome_unknown(
        tmp_path: Path, world: Path, runsc: object) -> None:
    async def scenario() -> None:
        async with Session(config=str(tmp_path / "cellgate.toml"), tools=[str(tmp_path / "tasks.py")],
                           notebook=tmp_path / "run.ipynb") as session:
            first = await session.execute("tools.slow_write(title='b')")
            assert first.status == "error" and [w.tool for w in first.writes.unknown] == ["slow_write"]
            Path(str(world) + ".fast").touch()
            second = await session.execute(
                "try:\n    tools.slow_write(title='b')\nexcept tools.OutcomeUnknown as e:\n"
                "    print('unknown:', e.kind, '#1' in str(e))\n    print(tools.list_tasks())\n", retry=True)
            assert second.ok, second.text
            assert second.stdout == "unknown: outcome_unknown True\n['b']\n"
            assert [w.tool for w in second.writes.unknown] == ["slow_write"]
        assert len([t for t in lines(world) if t["id"] == "slow"]) == 1

    asyncio.run(scenario())


# The gate's own process is killed while the 5th write is in flight: the tool has written it, and SIGKILLs the
# process it runs in (the kernelspec's launcher: the gate) before it can answer.
DYING_TOOLS = TOOLS + '''

def create_and_die(title: str) -> dict:
    """create_task, but the host process dies in the middle of the write named by CELLGATE_TEST_DIE_AT, once."""
    import signal
    task = create_task(title)
    if title == os.environ["CELLGATE_TEST_DIE_AT"] and not os.path.exists(WORLD + ".died"):
        open(WORLD + ".died", "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return task
'''

CRASH_LOOP = '''
for i in range(10):
    title = f"task {i}"
    try:
        tools.create_and_die(title=title)
    except tools.OutcomeUnknown:
        if title not in tools.list_tasks():  # look first, then write only if it is missing
            tools.create_and_die(title=title)
print(len(tools.list_tasks()), "exist")
'''


def run_cell(kc: Any, code: str, retry: bool = False, timeout: float = 120) -> tuple[dict[str, Any], str]:
    """Send one execute_request (with the retry metadata, as any frontend can) and read it to its reply."""
    msg = kc.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                             "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
                         metadata={"cellgate": {"retry": True}} if retry else {})
    kc.shell_channel.send(msg)
    text = []
    while True:
        out = kc.get_iopub_msg(timeout=timeout)
        if out["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            continue
        if out["msg_type"] == "stream":
            text.append(out["content"]["text"])
        elif out["msg_type"] == "error":
            text.append(f"{out['content']['ename']}: {out['content']['evalue']}\n")
        elif out["msg_type"] == "status" and out["content"]["execution_state"] == "idle":
            break
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
            return reply["content"], "".join(text)


def test_a_gate_killed_mid_loop_is_continued_by_a_new_process_whose_retry_answers_from_the_record(
        tmp_path: Path, world: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> None:
    (tmp_path / "dying.py").write_text(DYING_TOOLS)
    done = cellgate("install", "--prefix", str(tmp_path / "prefix"), check=True)
    assert "installed kernelspec" in done.stdout
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    config = tmp_path / "crash.toml"
    config.write_text(f'[tools]\nmodules = ["{tmp_path / "dying.py"}"]\n\n[audit]\ndir = "audit"\n\n'
                      '[policy]\ndefault = "allow"\n')
    monkeypatch.setenv("CELLGATE_CONFIG", str(config))
    monkeypatch.setenv("CELLGATE_TEST_DIE_AT", "task 4")
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel()
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        msg_id = kc.execute(CRASH_LOOP)
        km.provisioner.process.wait(timeout=120)  # the launcher (the gate's process) was SIGKILLed by the tool
        assert msg_id and km.provisioner.process.returncode == -signal.SIGKILL
        assert [t["title"] for t in lines(world)] == [f"task {i}" for i in range(5)]  # the 5th was made
        km.restart_kernel(now=True)  # a new launcher process: it continues the record from the journal
        kc.wait_for_ready(timeout=120)
        reply, text = run_cell(kc, CRASH_LOOP, retry=True)
        assert reply["status"] == "ok", text
        assert text == "10 exist\n"
        kc.stop_channels()
    finally:
        km.shutdown_kernel(now=False)
    # 10 tasks on the host, each once: 4 answered from the record, the 5th looked up, the last 5 made.
    assert sorted(t["title"] for t in lines(world)) == sorted(f"task {i}" for i in range(10))
    (notebook,) = sorted((tmp_path / "audit").glob("*.ipynb"))
    nb = nbformat.read(notebook, as_version=4)
    killed, retried = [c for c in nb.cells if c.cell_type == "code"]
    assert killed.metadata.cellgate.status == "killed"
    in_flight = [c for c in killed.metadata.cellgate.calls if c.get("outcome") == "needs-reconciliation"]
    assert [c["args"] for c in in_flight] == [{"title": "task 4"}]
    writes = Writes.of(retried.metadata.cellgate.calls)
    assert [w.args["title"] for w in writes.answered] == [f"task {i}" for i in range(4)]
    assert [(w.args["title"], w.error is not None and "#5" in w.error) for w in writes.unknown] == [("task 4", True)]
    assert [w.args["title"] for w in writes.committed] == [f"task {i}" for i in range(5, 10)]
    assert writes.reads == 2
    assert check_run(notebook).problems == []


PLAN_LOOP = '''
made = [tools.create_task(title=f"task {i}") for i in range(N)]
print(len(made), "writes;", len(tools.list_tasks()), "exist;", made[0])
'''


def test_a_plan_lists_50_writes_without_making_them_is_approved_once_and_applied_once(
        tmp_path: Path, world: Path, runsc: object) -> None:
    (tmp_path / "cellgate.toml").write_text('[sandbox]\ncall_timeout = 2\n\n[policy.tools.create_task]\n'
                                            'decision = "approve"\n')
    asked: list[str] = []

    def approver(request: Any) -> bool:
        asked.append(f"{request.tool}({request.args})")
        return False  # a write outside a plan is asked, and this person says no

    async def scenario() -> None:
        notebook = tmp_path / "run.ipynb"
        async with Session(config=str(tmp_path / "cellgate.toml"), tools=[str(tmp_path / "tasks.py")],
                           notebook=notebook, approver=approver) as session:
            plan = await session.plan("N = 50\n" + PLAN_LOOP)
            # Reads ran, writes did not: 0 on the host, 50 listed, each with the policy's decision.
            assert lines(world) == [] and asked == []
            assert plan.status == "ok", plan.output
            assert plan.output.startswith("50 writes; 0 exist; <planned create_task result")
            assert plan.counts == {"create_task": 50} and {w.decision for w in plan.writes} == {"approve"}
            assert "plan " + plan.id in plan.table() and "50 writes (50 create_task)" in plan.table()
            with pytest.raises(SessionError, match="not approved"):
                await session.apply(plan)
            plan.approve(by="ada", reason="the monthly tasks")
            applied = await session.apply(plan)
            assert applied.ok, applied.text
            assert len(lines(world)) == 50 and asked == []  # one approval for the set, no other prompt
            approvals = [c.approval for c in applied.calls if c.tool == "create_task"]
            assert all(a is not None and a["plan"] == plan.id and a["approver"] == "ada" for a in approvals)
            assert [a["planned_write"] for a in approvals if a] == list(range(1, 51))
            with pytest.raises(SessionError, match="applied already"):
                await session.apply(plan)

            # A write not in the plan is asked (and refused here); the planned ones are approved by the plan.
            small = await session.plan("N = 2\n" + PLAN_LOOP)
            small.approve()
            more = await session.apply(dataclasses.replace(small, code="N = 3\n" + PLAN_LOOP, id=small.id))
            assert more.status == "error"
            assert asked == ["create_task({'title': 'task 2'})"] and len(lines(world)) == 52

            # A plan made before another cell ran is stale.
            stale = await session.plan("N = 1\n" + PLAN_LOOP)
            stale.approve()
            await session.execute("x = 1")
            with pytest.raises(SessionError, match="stale: the session ran 1 cell"):
                await session.apply(stale)
        assert check_run(notebook).problems == []
        nb = nbformat.read(notebook, as_version=4)
        notes = [c.source for c in nb.cells if c.cell_type == "markdown"]
        assert any(n.startswith("**A plan was made") and "50 writes listed, none made" in n for n in notes)
        assert any(n.startswith(f"**Plan `{plan.id}` was applied") and "`ada`" in n for n in notes)

    asyncio.run(scenario())


def test_a_discarded_trial_names_the_writes_that_stay(tmp_path: Path, world: Path, runsc: object) -> None:
    async def scenario() -> None:
        notebook = tmp_path / "run.ipynb"
        async with Session(config=str(tmp_path / "cellgate.toml"), tools=[str(tmp_path / "tasks.py")],
                           notebook=notebook) as session:
            trial = await session.trial("for i in range(3):\n    tools.create_task(title=f'trial {i}')")
            stays = await trial.discard()
            assert [w.args["title"] for w in stays.done] == ["trial 0", "trial 1", "trial 2"]
            assert len(lines(world)) == 3  # the kernel forgot them; the world did not
        assert check_run(notebook).problems == []
        nb = nbformat.read(notebook, as_version=4)
        (note,) = [c.source for c in nb.cells if c.cell_type == "markdown" and "trial cell" in c.source]
        assert "was discarded. Its writes stay done in the world (3):" in note and "trial 2" in note

    asyncio.run(scenario())


def test_a_plan_is_one_item_in_the_approvals_queue_answered_from_another_terminal(
        tmp_path: Path, world: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> None:
    approvals = tmp_path / "approvals"
    monkeypatch.setenv("CELLGATE_APPROVALS_DIR", str(approvals))
    (tmp_path / "cellgate.toml").write_text('[policy]\napprover = "queue"\n\n[policy.tools.create_task]\n'
                                            'decision = "approve"\n')

    async def scenario() -> None:
        async with Session(config=str(tmp_path / "cellgate.toml"), tools=[str(tmp_path / "tasks.py")],
                           notebook=tmp_path / "run.ipynb") as session:
            plan = await session.plan("N = 5\n" + PLAN_LOOP)
            asking = asyncio.ensure_future(session.ask(plan))
            # One request for the set, whatever its size; the person sees its writes and answers once.
            while not (found := list(approvals.glob("*.request.json"))):
                assert not asking.done(), asking
                await asyncio.sleep(0.05)  # the queue is a folder another process writes: polled, as the CLI does
            (request,) = found
            listed = await asyncio.to_thread(cellgate, "approvals", "list")
            assert listed.returncode == 0 and listed.stdout.count("plan") >= 1, listed.stdout
            shown = await asyncio.to_thread(cellgate, "approvals", "show", request.name.removesuffix(".request.json"))
            assert "task 4" in shown.stdout and "create_task" in shown.stdout, shown.stdout
            answered = await asyncio.to_thread(cellgate, "approvals", "approve",
                                               request.name.removesuffix(".request.json"), "--reason", "monthly")
            assert answered.returncode == 0, answered.stderr
            assert await asking is True and plan.state == "approved" and plan.reason == "monthly"
            applied = await session.apply(plan)
            assert applied.ok, applied.text
            assert len(lines(world)) == 5 and not list(approvals.glob("*.request.json"))

    asyncio.run(scenario())
