"""An interrupt asked for as soon as a cell is sent stops it (the CI failure of stop 49).

ipykernel ignores SIGINT until its execute handler runs: an interrupt_request that reaches the kernel between the
host relaying a cell and the kernel starting it was lost, and the cell ran to its timeout. The host now sends the
interrupt again when the kernel says it started the cell (execute_input). Real gVisor sandbox, real ipykernel.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cellgate.gate import Session
from tests.conftest import SAMPLE_TOOLS

TRIES = 12


def test_an_interrupt_sent_the_moment_a_cell_is_relayed_stops_the_cell(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], str]:
        ended = []
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            for _ in range(TRIES):
                running = asyncio.ensure_future(session.execute("import time\nwhile True: time.sleep(0.01)"))
                while await session.provisioner.running_cell() is None:
                    await asyncio.sleep(0)  # the earliest moment the host knows of the cell
                await session.interrupt()
                try:
                    ended.append((await asyncio.wait_for(asyncio.shield(running), 15)).status)
                except TimeoutError:
                    ended.append("still running 15 s after the interrupt")
                    await session.interrupt()  # the kernel has started it by now
                    await running
            return ended, (await session.execute("print('still here')")).stdout

    ended, after = asyncio.run(scenario())
    assert ended == ["interrupted"] * TRIES
    assert after == "still here\n"
