"""Session.stream: a cell's outputs and gated calls come out as they happen, before the cell ends."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate import Session, SyncSession

pytestmark = pytest.mark.gvisor

# A line a second; after the first, the cell waits for the reader to have seen it (through a gated call whose
# tool waits on the host): if stream held its items back until the cell's end, the tool would time out.
CELL = """
import time
for i in range(3):
    print("line", i, flush=True)
    if i == 0:
        print("released" if tools.wait_for_reader() else "not released", flush=True)
    time.sleep(1)
"""


def reader_gate() -> tuple[threading.Event, Any]:
    seen = threading.Event()

    def wait_for_reader() -> bool:
        """Whether the reader saw the first line within 60 s."""
        return seen.wait(60)

    return seen, wait_for_reader


def label(item: dict[str, Any]) -> str:
    if item.get("event") == "call":
        return f"call {item['tool']} {item['decision']} {item['ok']} {item.get('result')}"
    if item.get("event") == "end":
        result = item["result"]
        return f"end {result.status}"
    return item.get("text", item.get("output_type", "?")).strip()


def test_stream_yields_the_first_line_before_the_cell_ends(runsc: object, tmp_path: Path) -> None:
    seen, tool = reader_gate()
    got: list[str] = []
    with SyncSession(tools=[tool], notebook=tmp_path / "run.ipynb", cwd=tmp_path, call_timeout=90.0) as box:
        for item in box.stream(CELL):
            got.append(label(item))
            if got[-1] == "line 0":
                seen.set()
        last = item["result"]
    lines = [g for g in got if g.startswith(("line", "released", "not released"))]
    assert lines == ["line 0", "released", "line 1", "line 2"], got
    assert got.index("call wait_for_reader allow True True") < got.index("released")
    assert got[-1] == "end ok" and last.stdout == "line 0\nreleased\nline 1\nline 2\n"
    assert [(c.tool, c.ok) for c in last.calls] == [("wait_for_reader", True)]


def test_the_async_stream_ends_with_the_cell_and_closing_it_early_waits_for_the_end(
        runsc: object, tmp_path: Path) -> None:
    async def main() -> tuple[list[str], str]:
        seen, tool = reader_gate()
        async with Session(tools=[tool], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            got = []
            async with contextlib.aclosing(session.stream(CELL)) as items:
                async for item in items:
                    got.append(label(item))
                    if got[-1] == "line 0":
                        seen.set()
                        break
            # Closed early: the close returned once the cell had ended and was recorded.
            (cell,) = [c for c in session.recorder.notebook().cells if "wait_for_reader" in c.source]
            return got, cell.metadata.cellgate["status"], [o.get("text") for o in cell.outputs]

    got, status, outputs = asyncio.run(main())
    assert got == ["line 0"]
    assert status == "ok" and "".join(t for t in outputs if t) == "line 0\nreleased\nline 1\nline 2\n"
