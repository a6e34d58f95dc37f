"""The cells' owner without a sandbox (``session.cells.queue.CellQueue``), made with its ``SessionContext`` and the
kernel's keeper it asks (``KernelControl``, noted here), as the relay makes it: what the kernel's owner tells it
(``KernelListener``: recovered output, the running cells marked, the kernel's end) ends every cell with the
reason and answers its frontend; a journal that breaks while a cell runs never stops the clock from
interrupting it and the grace from killing the kernel. Real recorder and dispatcher (see
``test_cell_queue_shells.py`` for the shells)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate.audit.recorder import CellRecord, Recorder
from cellgate.gate.calls.dispatch import Dispatcher
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.sandbox.cpuclock import CpuSource
from cellgate.gate.session.cells.queue import CellQueue, CellTimeouts, FrontendRequest
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.kernel.watch import KernelEnd


class Kernel:
    """What the queue asks of the kernel's keeper, noted."""

    def __init__(self) -> None:
        self.interrupted = asyncio.Event()
        self.killed = asyncio.Event()
        self.received: list[tuple[str, dict[str, Any]]] = []

    def interrupt_soon(self) -> None:
        self.interrupted.set()

    def kill_soon(self) -> bool:
        self.killed.set()
        return True

    def cpu_source(self) -> CpuSource:
        return CpuSource(None, None)  # the clock counts wall time

    def output_received(self, msg_id: str, output: dict[str, Any]) -> None:
        self.received.append((msg_id, output))

    def outputs_lost(self) -> int:
        return 0


@pytest.fixture()
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    recorder = Recorder(tmp_path / "run.ipynb", {})
    yield recorder
    recorder.journal.broken = None
    recorder.close()


def queue(recorder: Recorder, kernel: Kernel, timeouts: CellTimeouts = CellTimeouts()
          ) -> tuple[CellQueue, list[dict[str, Any]]]:
    answered: list[dict[str, Any]] = []

    async def sent() -> None:
        pass

    def answer(header: dict[str, Any], idents: list[bytes], error: dict[str, Any]) -> Coroutine[Any, Any, None]:
        answered.append({"msg_id": header["msg_id"], **error})
        return sent()

    ctx = SessionContext.create(recorder)
    return CellQueue(ctx, Dispatcher(ToolRegistry([]), log=recorder), kernel, timeouts, 1 << 20, answer), answered


def send(cells: CellQueue, recorder: Recorder, msg_id: str) -> CellRecord:
    record = recorder.cell_sent(msg_id, f"# {msg_id}", False)
    cells.add(record, FrontendRequest(header={"msg_id": msg_id}, idents=[]))
    return record


def test_a_kernel_end_gives_the_running_cell_its_error_and_ends_every_queued_cell(recorder: Recorder) -> None:
    async def scenario() -> tuple[list[CellRecord], list[dict[str, Any]], Kernel]:
        kernel = Kernel()
        cells, answered = queue(recorder, kernel)
        send(cells, recorder, "a")
        send(cells, recorder, "b")  # queued behind a
        assert cells.any_running()
        cells.recover_output(lambda msg_id: [{"output_type": "stream", "name": "stdout", "text": f"{msg_id}!\n"}])
        error = {"ename": "SandboxMemoryLimit", "evalue": "the sandbox reached its memory limit"}
        cells.kernel_ended(KernelEnd("memory", "memory", error))
        ended = [await asyncio.wait_for(asyncio.wrap_future(cells.results.future(m)), 10) for m in ("a", "b")]
        assert not cells.any_running()
        return ended, answered, kernel

    (a, b), answered, kernel = asyncio.run(scenario())
    assert (a.status, a.error, a.limits_hit) == ("memory", {"ename": "SandboxMemoryLimit",
                                                             "evalue": "the sandbox reached its memory limit"},
                                                 ["memory"])
    assert [o["text"] for o in a.outputs] == ["a!\n"]  # recovered from the kernel's log, the running cell's only
    assert kernel.received == [("a", a.outputs[0])]  # the kernel's ledger is told what the cell got
    assert b.status == "memory" and b.outputs == []
    assert [(n["msg_id"], n["ename"]) for n in answered] == [("a", "CellKilled"), ("b", "CellKilled")]


def test_marked_cells_end_with_the_limit_the_kernel_hit_when_it_is_stopped(recorder: Recorder) -> None:
    async def scenario() -> CellRecord:
        cells, _ = queue(recorder, Kernel())
        send(cells, recorder, "a")
        error = {"ename": "MessageTooLarge", "evalue": "over the limit"}
        cells.mark(KernelEnd("error", "message-size", error))
        cells.kernel_ended(KernelEnd("error", "message-size"))  # the host's kill that follows
        return await asyncio.wait_for(asyncio.wrap_future(cells.results.future("a")), 10)

    a = asyncio.run(scenario())
    assert (a.status, a.error["ename"], a.limits_hit) == ("error", "MessageTooLarge", ["message-size"])


def test_a_journal_that_breaks_while_a_cell_runs_never_stops_its_timeout_or_its_kill(recorder: Recorder) -> None:
    async def scenario() -> Kernel:
        kernel = Kernel()
        cells, _ = queue(recorder, kernel, CellTimeouts(cell=0.05, interrupt_grace=0.05))
        send(cells, recorder, "loop")  # started, under its clock
        recorder.journal.broken = "the disk is full (the test's journal broke after the cell started)"
        async with asyncio.timeout(10):
            await kernel.interrupted.wait()  # the timeout's interrupt, though cell-timeout cannot be journalled
            await kernel.killed.wait()  # the grace's kill, though cell-kill cannot be journalled
        cells.kernel_ended(KernelEnd("killed", "killed-by-host"))
        await asyncio.wait_for(asyncio.wrap_future(cells.results.future("loop")), 10)
        return kernel

    asyncio.run(scenario())
