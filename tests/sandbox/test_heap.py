"""The kernel's heap (issue 33): what a cell frees stays with the kernel while it works (a page first touched
inside gVisor is a costly fault: a large tool result decodes twice as fast into kept pages), and goes back to the
host once the kernel is idle (``cellgate.kernel.heap``), measured where the host counts it: the sandbox's cgroup."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cellgate.gate import Session

ALLOCATE_AND_FREE = "data = [str(i) * 3 for i in range(3_000_000)]\ndel data"  # ~250 MB of small objects
MB = 1 << 20


def usage_file(sandbox_id: str) -> Path | None:
    for path in (Path("/sys/fs/cgroup/memory/cellgate", sandbox_id, "memory.usage_in_bytes"),
                 Path("/sys/fs/cgroup/cellgate", sandbox_id, "memory.current")):
        if path.is_file():
            return path
    return None


@pytest.mark.root_only  # the sandbox's memory cgroup is runsc's own as root (test_limits covers a delegated one)
def test_a_cells_freed_memory_is_kept_while_it_runs_and_given_back_once_the_kernel_is_idle(
        tmp_path: Path, runsc: object) -> None:
    async def run() -> tuple[int, int, int, str]:
        async with Session(tools=[], notebook=tmp_path / "heap.ipynb", cwd=tmp_path) as session:
            usage = usage_file(session.provisioner.handle.id)
            assert usage is not None, "as root the sandbox's memory cgroup is runsc's own"
            before = int(usage.read_text())
            assert (await session.execute(ALLOCATE_AND_FREE)).ok
            kept = int(usage.read_text())
            deadline = time.monotonic() + 30  # the trim comes IDLE_TRIM_AFTER (3 s) after the cell
            while (now := int(usage.read_text())) > before + 64 * MB and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            trims = (await session.execute("print(get_ipython().kernel.idle_trim.trims)")).stdout
            return before, kept, now, trims

    before, kept, after, trims = asyncio.run(run())
    assert kept - before > 150 * MB, (before, kept)  # freed, yet still the kernel's: the next cell reuses it
    assert after - before < 64 * MB, (before, kept, after)  # given back while idle
    assert int(trims) >= 1, trims
