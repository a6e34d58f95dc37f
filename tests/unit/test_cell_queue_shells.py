"""The relay's queue of cells with kernel subshells: a running cell per shell, each a FIFO, and what a kernel's
claim of a cell is worth (``session.cells.CellQueue``, ``session.subshells``), with the real recorder and
dispatcher and no kernel."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from typing_extensions import override

from cellgate.gate.audit.recorder import CellRecord, Recorder
from cellgate.gate.calls.approval import ApprovalAnswer, ApprovalRequest, Approver
from cellgate.gate.calls.dispatch import Dispatcher
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.registry import Tool, ToolRegistry
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.session.cells.queue import CellQueue, CellTimeouts, FrontendRequest
from cellgate.gate.session.cells.subshells import MAX_SUBSHELLS, Subshells
from cellgate.gate.session.context import SessionContext


class Kernel:
    """What the queue asks of the kernel's keeper, noted (the queue is what is tested)."""

    def __init__(self) -> None:
        self.interrupts = 0
        self.killed = asyncio.Event()

    def interrupt_soon(self) -> None:
        self.interrupts += 1

    def kill_soon(self) -> bool:
        self.killed.set()
        return True

    def cpu_source(self) -> CpuSource:
        return CpuSource(None, None)

    def output_received(self, msg_id: str, output: dict[str, Any]) -> None:
        pass

    def outputs_lost(self) -> int:
        return 0


@pytest.fixture()
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    recorder = Recorder(tmp_path / "run.ipynb", {})
    yield recorder
    recorder.close()


class HeldApprover(Approver):
    """Holds every request until the test answers it (``answer``), or its cell withdraws it."""

    name = "held"

    def __init__(self) -> None:
        self.waiting: dict[int, asyncio.Future[ApprovalAnswer]] = {}  # by the call's seq
        self.asked = asyncio.Event()

    @override
    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.waiting[request.seq] = asyncio.get_running_loop().create_future()
        self.asked.set()
        return await self.waiting[request.seq]

    @override
    def withdraw(self, request: ApprovalRequest, reason: str) -> None:
        self.waiting.pop(request.seq).cancel()

    async def next_request(self) -> None:
        await asyncio.wait_for(self.asked.wait(), 10)
        self.asked.clear()


def queue_of(recorder: Recorder, timeouts: CellTimeouts = CellTimeouts(), approver: Approver | None = None,
             kernel: Kernel | None = None) -> tuple[CellQueue, list[dict[str, Any]]]:
    echo = Tool("echo", "", {"type": "object", "properties": {"text": {"type": "string"}}}, lambda text: text)
    policy = Policy.model_validate({"default": "allow", "tools": {"echo": {"max_calls_per_cell": 1},
                                                                  "add": {"decision": "approve"}}})
    add = Tool("add", "", {"type": "object", "properties": {"a": {"type": "integer"}}}, lambda a: a + 1)
    dispatcher = Dispatcher(ToolRegistry([echo, add]), log=recorder, policy=policy, approver=approver)
    answered: list[dict[str, Any]] = []

    async def sent() -> None:
        pass

    def answer(header: dict[str, Any], idents: list[bytes], error: dict[str, Any]) -> Coroutine[Any, Any, None]:
        answered.append({"msg_id": header["msg_id"], **error})  # noted when the queue asks, not when it is sent
        return sent()

    cells = CellQueue(SessionContext.create(recorder), dispatcher, kernel or Kernel(), timeouts, 1 << 20, answer)
    return cells, answered


def send(cells: CellQueue, recorder: Recorder, msg_id: str, shell: str | None = None) -> CellRecord:
    record = recorder.cell_sent(msg_id, f"# {msg_id}", False, subshell=shell)
    cells.add(record, FrontendRequest(header={"msg_id": msg_id}, idents=[]), shell)
    return record


def end(cells: CellQueue, msg_id: str) -> None:
    run = cells.running_cell(msg_id)
    assert run is not None
    cells.replied(run, "ok", None)
    cells.idle(run)


def test_each_shell_runs_its_own_head_and_a_claim_counts_only_for_a_running_cell(recorder: Recorder) -> None:
    async def scenario() -> None:
        cells, _ = queue_of(recorder)
        assert cells.subshells.may_create("create-1")
        assert cells.subshells.created("create-1", {"status": "ok", "subshell_id": "sub"}) == "sub"
        send(cells, recorder, "main-a")
        send(cells, recorder, "main-b")  # queued behind main-a on the main shell
        send(cells, recorder, "sub-c", "sub")  # runs beside main-a
        assert [run.record.msg_id for run in cells.heads()] == ["main-a", "sub-c"]
        assert [record["msg_id"] for record in journal(recorder) if record["event"] == "cell-started"] == [
            "main-a", "sub-c"]
        assert cells.running_cell("main-b") is None and cells.running_cell("nobody") is None
        main, sub = cells.running_cell("main-a"), cells.running_cell("sub-c")
        assert main is not None and sub is not None
        assert cells.attribute("sub-c") is sub and cells.attribute("main-a") is main
        # A claim of a cell that is not running falls to the first running cell, whose scope refuses it as late.
        assert cells.attribute("main-b") is main and cells.attribute(None) is main
        late = cells.dispatcher.admit(CallRequest(id="x1", tool="echo", args={}, cell="main-b"), main.scope())
        assert late is not None and late.reply.error is not None and late.reply.error["kind"] == "no_cell"

        # Per-cell budgets are each cell's own: one echo per cell, in either order.
        outcomes = []
        for call_id, run in (("x2", main), ("x3", sub), ("x4", main), ("x5", sub)):
            request = CallRequest(id=call_id, tool="echo", args={"text": call_id}, cell=run.record.msg_id)
            assert cells.dispatcher.admit(request, run.scope()) is None
            outcomes.append((await cells.dispatcher.serve(request, run.scope())).reply.ok)
        assert outcomes == [True, True, False, False]

        end(cells, "sub-c")  # the subshell's cell ends; the main shell's goes on
        assert [run.record.msg_id for run in cells.heads()] == ["main-a"]
        end(cells, "main-a")
        assert [run.record.msg_id for run in cells.heads()] == ["main-b"]
        end(cells, "main-b")
        assert not cells
        cells.dispatcher.close()

    asyncio.run(scenario())
    recorder.write_notebook()
    notebook = nbformat.read(recorder.notebook_path, as_version=4)
    shown = {cell.source: cell.metadata.cellgate for cell in notebook.cells}
    assert shown["# sub-c"]["subshell"] == "sub" and "subshell" not in shown["# main-a"]
    assert [c["args"]["text"] for c in shown["# main-a"]["calls"]] == ["x2", "x4"]
    assert [c["args"]["text"] for c in shown["# sub-c"]["calls"]] == ["x3", "x5"]
    assert [c["ok"] for c in shown["# sub-c"]["calls"]] == [True, False]


def journal(recorder: Recorder) -> list[dict[str, Any]]:
    return [json.loads(line) for line in recorder.journal.path.read_text().splitlines()]


def test_an_approval_waiting_in_a_subshell_cell_dies_with_that_cell_and_the_main_cells_request_waits_on(
        recorder: Recorder) -> None:
    async def scenario() -> list[Any]:
        approver = HeldApprover()
        cells, _ = queue_of(recorder, approver=approver)
        cells.subshells.may_create("create-1")
        cells.subshells.created("create-1", {"status": "ok", "subshell_id": "sub"})
        send(cells, recorder, "main-a")
        send(cells, recorder, "sub-b", "sub")
        calls = []
        for call_id, msg_id in (("m", "main-a"), ("s", "sub-b")):
            run = cells.running_cell(msg_id)
            assert run is not None
            request = CallRequest(id=call_id, tool="add", args={"a": 1}, cell=msg_id)
            calls.append(asyncio.ensure_future(cells.dispatcher.serve(request, run.scope())))
            await approver.next_request()
        end(cells, "sub-b")  # the subshell's cell ends while its call waits for a person
        sub_call = await asyncio.wait_for(calls[1], 10)
        assert not calls[0].done() and list(approver.waiting) == [1]  # the main cell's request still waits
        approver.waiting[1].set_result(ApprovalAnswer("allow", "held", "", 0.0))
        main_call = await asyncio.wait_for(calls[0], 10)
        end(cells, "main-a")
        cells.dispatcher.close()
        return [(outcome.record.decision, outcome.reply.ok) for outcome in (main_call, sub_call)]

    assert asyncio.run(scenario()) == [("approved", True), ("approval-withdrawn", False)]
    withdrawn = [r for r in journal(recorder) if r["event"] == "approval-withdrawn"]
    assert [(r["msg_id"], r["tool"]) for r in withdrawn] == [("sub-b", "add")]


def test_a_subshell_cell_past_its_timeout_is_not_interrupted_but_stopped_with_the_kernel(recorder: Recorder) -> None:
    async def scenario() -> tuple[Kernel, list[dict[str, Any]]]:
        kernel = Kernel()
        cells, answered = queue_of(recorder, CellTimeouts(cell=0.0, interrupt_grace=0.0), kernel=kernel)
        cells.subshells.may_create("create-1")
        cells.subshells.created("create-1", {"status": "ok", "subshell_id": "sub"})
        send(cells, recorder, "sub-c", "sub")
        await asyncio.wait_for(kernel.killed.wait(), 10)
        cells.fail_all("killed", "killed-by-host")  # what the kernel's keeper does when the kernel is gone
        assert not cells.subshells.knows("sub")
        return kernel, answered

    kernel, answered = asyncio.run(scenario())
    assert kernel.interrupts == 0  # an interrupt would stop the main shell's cell, not this one
    assert [a["ename"] for a in answered] == ["CellKilled"]
    (cell,) = recorder.cells
    assert cell.status == "killed" and cell.limits_hit == ["timeout", "killed-by-host"]


def test_a_deleted_subshell_never_runs_the_cells_queued_on_it(recorder: Recorder) -> None:
    async def scenario() -> list[dict[str, Any]]:
        cells, answered = queue_of(recorder)
        cells.subshells.may_create("create-1")
        cells.subshells.created("create-1", {"status": "ok", "subshell_id": "sub"})
        send(cells, recorder, "sub-1", "sub")
        send(cells, recorder, "sub-2", "sub")
        cells.subshells.deleting("delete-1", "sub")
        assert cells.subshells.deleted("delete-1", {"status": "ok"}) == "sub"
        cells.subshell_deleted("sub")
        end(cells, "sub-1")  # the kernel ends the running cell before it deletes its subshell
        assert not cells
        return answered

    answered = asyncio.run(scenario())
    assert [(a["msg_id"], a["ename"]) for a in answered] == [("sub-2", "SubshellDeleted")]
    assert [c.msg_id for c in recorder.cells] == ["sub-1"]  # never ran: in the journal only, as an aborted cell


def test_subshells_are_bounded_and_known_only_from_replies_to_requests_the_host_relayed() -> None:
    subshells = Subshells()
    assert subshells.created("never-asked", {"status": "ok", "subshell_id": "forged"}) is None
    assert [subshells.may_create(f"create-{n}") for n in range(MAX_SUBSHELLS + 1)] == [True] * MAX_SUBSHELLS + [False]
    assert subshells.created("create-0", {"status": "ok", "subshell_id": "x" * 65}) is None  # over the id bound
    assert subshells.created("create-1", {"status": "error"}) is None
    assert subshells.created("create-2", {"status": "ok", "subshell_id": "ok-id"}) == "ok-id"
    assert subshells.created("create-2", {"status": "ok", "subshell_id": "again"}) is None  # answered once
    assert subshells.knows("ok-id") and not subshells.knows("again") and not subshells.knows(["ok-id"])
    assert subshells.may_create("create-again")  # answered requests free their places
    subshells.deleting("delete-1", "not-known")
    assert subshells.deleted("delete-1", {"status": "ok"}) is None
    subshells.forget_all()
    assert not subshells.knows("ok-id")


# Replies come on shell and outputs on IOPub: two sockets, so with cells queued back to back ("Run all") the host
# may read either ahead of the other. Each test drives the queue as the relay's taps do (``Taps.reply`` looks a
# reply up with ``replying_cell``, IOPub with ``running_cell``).

def reply(cells: CellQueue, msg_id: str, status: str = "ok") -> bool:
    run = cells.replying_cell(msg_id)
    if run is not None:
        cells.replied(run, status, None)
    return run is not None


def iopub(cells: CellQueue, msg_id: str, text: str | None = None) -> bool:
    """The cell's output ``text`` (if any), then its idle status."""
    run = cells.running_cell(msg_id)
    if run is not None:
        if text is not None:
            cells.capture(run, {"output_type": "stream", "name": "stdout", "text": text})
        cells.idle(run)
    return run is not None


def recorded(recorder: Recorder) -> list[tuple[str, str | None, str]]:
    recorder.write_notebook()
    notebook = nbformat.read(recorder.notebook_path, as_version=4)
    return [(c.source, c.metadata.cellgate.get("status"), "".join(o.get("text", "") for o in c.outputs))
            for c in notebook.cells]


def test_replies_read_ahead_of_iopub_each_end_their_own_cell(recorder: Recorder) -> None:
    async def scenario() -> None:
        cells, _ = queue_of(recorder)
        for msg_id in "abc":
            send(cells, recorder, msg_id)
        assert reply(cells, "a") and reply(cells, "b") and reply(cells, "c")  # before IOPub says a word
        assert not reply(cells, "a")  # answered once
        assert [run.record.msg_id for run in cells.heads()] == ["a"]
        assert iopub(cells, "a", "A\n") and iopub(cells, "b", "B\n") and iopub(cells, "c", "C\n")
        assert not cells
        cells.dispatcher.close()

    asyncio.run(scenario())
    assert recorded(recorder) == [("# a", "ok", "A\n"), ("# b", "ok", "B\n"), ("# c", "ok", "C\n")]
    started = [r["msg_id"] for r in journal(recorder) if r["event"] == "cell-started"]
    assert started == ["a", "b", "c"]


def test_iopub_read_ahead_of_replies_is_the_next_cells_and_replies_are_taken_in_order(recorder: Recorder) -> None:
    async def scenario() -> None:
        cells, _ = queue_of(recorder)
        for msg_id in "abc":
            send(cells, recorder, msg_id)
        assert not iopub(cells, "b")  # not running yet: a has not gone idle
        assert iopub(cells, "a", "A\n")  # a is done; its reply is still on its way
        assert [run.record.msg_id for run in cells.heads()] == ["b"]
        assert not iopub(cells, "c")
        late = cells.running_cell("a")  # gone idle, not yet answered: output naming it is still its own
        assert late is not None and late is not cells.running()
        cells.capture(late, {"output_type": "stream", "name": "stdout", "text": "A2\n"})
        assert iopub(cells, "b", "B\n")
        assert not reply(cells, "b")  # a shell answers in the order its cells were relayed: a first
        assert reply(cells, "a") and reply(cells, "b")
        assert iopub(cells, "c", "C\n") and reply(cells, "c", "aborted")  # an aborted cell's reply ends it
        assert not cells
        cells.dispatcher.close()

    asyncio.run(scenario())
    assert recorded(recorder) == [("# a", "ok", "A\nA2\n"), ("# b", "ok", "B\n")]  # an aborted cell: journal only
    ends = [(r["event"], r["msg_id"]) for r in journal(recorder) if r["event"] in ("cell-ended", "cell-aborted")]
    assert ends == [("cell-ended", "a"), ("cell-ended", "b"), ("cell-aborted", "c")]


def test_a_cell_the_kernel_went_idle_after_but_never_answered_times_out_without_an_interrupt(
        recorder: Recorder) -> None:
    async def scenario() -> Kernel:
        kernel = Kernel()
        cells, _ = queue_of(recorder, CellTimeouts(cell=0.2, interrupt_grace=0.0), kernel=kernel)
        send(cells, recorder, "a")
        assert iopub(cells, "a", "A\n")  # and no execute_reply, ever
        await asyncio.wait_for(asyncio.wrap_future(cells.results.future("a")), 10)
        assert not cells
        cells.dispatcher.close()
        return kernel

    kernel = asyncio.run(scenario())
    assert kernel.interrupts == 0 and not kernel.killed.is_set()  # the kernel runs no part of it: nothing to stop
    (cell,) = recorder.cells
    assert cell.status == "timeout" and cell.limits_hit == ["timeout"]
    assert recorded(recorder) == [("# a", "timeout", "A\n")]
