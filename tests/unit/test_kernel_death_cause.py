"""How the host words a kernel's end when two causes race: the memory limit the sandbox reached wins over the
host's own kill of a cell past its timeout (``session.kernel_watch``), with the real recorder and queue and a
sandbox backend that answers as runsc's would."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.calls.dispatch import Dispatcher
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.sandbox.backend import ReportedByWait, SandboxStatus
from cellgate.gate.session.cells.queue import CellQueue, CellTimeouts, FrontendRequest
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.kernel.watch import KernelEnd, KernelWatch


class OomKilledWhileTheHostKills:
    """The sandbox ends at its memory limit just as the host's kill reaches it."""

    def __init__(self) -> None:
        self.kill_sent = threading.Event()

    def watch_memory(self, sandbox: Any, hit: Any) -> ReportedByWait:
        return ReportedByWait()  # this backend's wait reports a memory death

    def wait(self, sandbox: Any) -> SandboxStatus:
        assert self.kill_sent.wait(30), "the host never killed the sandbox"
        return SandboxStatus("memory", 137, "OOM-killed")

    def kill(self, sandbox: Any) -> None:
        self.kill_sent.set()

    def output_log(self, sandbox: Any) -> None:
        return None  # the host cannot read this kernel's log


class Handle:
    id = "sandbox-1"
    key = "0" * 64
    memory_limit_bytes = 512 << 20

    def __init__(self, backend: OomKilledWhileTheHostKills) -> None:
        self.backend = backend


class Told:
    """The kernel's listener, as the relay is: what the keeper says goes to the queue (set once it is made)."""

    def __init__(self) -> None:
        self.cells: CellQueue | None = None
        self.gone: list[str] = []

    def any_running(self) -> bool:
        assert self.cells is not None
        return self.cells.any_running()

    def recover_output(self, lost: Any) -> None:
        assert self.cells is not None
        self.cells.recover_output(lost)

    def mark(self, end: KernelEnd) -> None:
        assert self.cells is not None
        self.cells.mark(end)

    def kernel_ended(self, end: KernelEnd) -> None:
        assert self.cells is not None
        self.cells.kernel_ended(end)

    def kernel_gone(self, event: str) -> None:
        self.gone.append(event)


def test_a_timeout_kill_that_races_the_memory_limit_ends_the_cell_as_memory(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "run.ipynb", {})

    async def scenario() -> None:
        answers: list[dict[str, Any]] = []

        async def answer(header: dict[str, Any], idents: list[bytes], error: dict[str, Any]) -> None:
            answers.append(error)

        ctx = SessionContext.create(recorder)
        told = Told()
        watch = KernelWatch(ctx, listener=told)
        cells = told.cells = CellQueue(ctx, Dispatcher(ToolRegistry([]), log=recorder), watch, CellTimeouts(),
                                       1 << 20, answer)
        record = recorder.cell_sent("cell-1", "x = bytearray(5 << 30)", False)
        result = cells.results.future("cell-1")
        cells.add(record, FrontendRequest(header={"msg_id": "cell-1"}, idents=[]))
        watch.attached(Handle(OomKilledWhileTheHostKills()), None, None)  # type: ignore[arg-type]
        assert watch.kill_soon()  # as the grace after the cell's timeout does
        ended = await asyncio.wait_for(asyncio.wrap_future(result), 30)
        assert ended.status == "memory" and ended.error["ename"] == "SandboxMemoryLimit", (ended.status, ended.error)
        assert told.gone == ["kernel-died"]
        await ctx.tasks.end_session()

    try:
        asyncio.run(scenario())
    finally:
        recorder.close()
