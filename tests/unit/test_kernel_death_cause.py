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
from cellgate.gate.session.bounds import HostBounds
from cellgate.gate.session.cells import CellQueue, CellTimeouts, FrontendRequest
from cellgate.gate.session.events import RelayEvents, Tasks
from cellgate.gate.session.kernel_watch import KernelWatch


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


class Handle:
    id = "sandbox-1"
    key = "0" * 64
    memory_limit_bytes = 512 << 20

    def __init__(self, backend: OomKilledWhileTheHostKills) -> None:
        self.backend = backend


def test_a_timeout_kill_that_races_the_memory_limit_ends_the_cell_as_memory(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "run.ipynb", {})

    async def scenario() -> None:
        answers: list[dict[str, Any]] = []

        async def answer(header: dict[str, Any], idents: list[bytes], error: dict[str, Any]) -> None:
            answers.append(error)

        events, tasks = RelayEvents(recorder), Tasks()
        cells = CellQueue(recorder, Dispatcher(ToolRegistry([]), log=recorder), events, tasks, CellTimeouts(),
                          HostBounds(), 1 << 20, answer)
        watch = KernelWatch(cells, events, tasks, HostBounds())
        cells.kernel = watch  # type: ignore[assignment]
        record = recorder.cell_sent("cell-1", "x = bytearray(5 << 30)", False)
        result = cells.results.future("cell-1")
        cells.add(record, FrontendRequest(header={"msg_id": "cell-1"}, idents=[]))
        watch.attached(Handle(OomKilledWhileTheHostKills()), None, None)  # type: ignore[arg-type]
        assert watch.kill_soon()  # as the grace after the cell's timeout does
        ended = await asyncio.wait_for(asyncio.wrap_future(result), 30)
        assert ended.status == "memory" and ended.error["ename"] == "SandboxMemoryLimit", (ended.status, ended.error)
        await tasks.end_session()

    try:
        asyncio.run(scenario())
    finally:
        recorder.close()
