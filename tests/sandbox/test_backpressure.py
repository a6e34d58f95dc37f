"""Backpressure, not timeouts (issue 33): a call waits for a free slot of its tool up to [policy] max_queue_wait and
only past that bound fails as busy (ToolBusy, kind "busy" in the journal), never run; its own deadline
([sandbox] call_timeout) measures the tool's run, not the wait."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

TOOLS = '''
import time


def hold(seconds: float) -> str:
    """Hold one of the tool's slots for a while.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "done"
'''

GATHER = """
import asyncio
outcomes = await asyncio.gather(*(tools.aio.hold({seconds}) for _ in range({count})), return_exceptions=True)
print(sorted(o if isinstance(o, str) else type(o).__name__ + ":" + o.kind for o in outcomes))
"""


def config(folder: Path, concurrency: int, queue_wait: float) -> Path:
    (folder / "slow_tools.py").write_text(TOOLS)
    path = folder / "cellgate.toml"
    path.write_text(f'[tools]\nmodules = ["slow_tools.py"]\n\n[policy]\ndefault = "deny"\n\n'
                    f'[policy.tools.hold]\ndecision = "allow"\nmax_concurrency = {concurrency}\n'
                    f'max_queue_wait = {queue_wait}\n')
    return path


def calls_of(notebook: Path) -> list[dict[str, Any]]:
    nb = nbformat.read(notebook, as_version=4)
    return [call for cell in nb.cells for call in cell.metadata.get("cellgate", {}).get("calls", [])]


def test_calls_past_the_queue_bound_fail_as_busy_and_within_it_all_run(session_factory: Any, tmp_path: Path) -> None:
    box = session_factory(config=str(config(tmp_path, concurrency=2, queue_wait=2.0)), tools=[],
                          notebook=tmp_path / "run.ipynb")
    # Two calls hold both slots for 6 s: the other two wait 2 s, then fail as busy without running.
    saturated = box.execute(GATHER.format(seconds=6, count=4))
    assert saturated.ok, saturated.text
    assert saturated.stdout.strip() == "['ToolBusy:busy', 'ToolBusy:busy', 'done', 'done']"
    # Short calls free their slots well within the bound: every one of them runs.
    within = box.execute(GATHER.format(seconds=0.1, count=6))
    assert within.stdout.strip() == str(["done"] * 6)
    box.close()
    calls = calls_of(tmp_path / "run.ipynb")
    busy = [c for c in calls if not c["ok"]]
    assert len(busy) == 2 and len(calls) == 10
    for call in busy:
        assert call["error"]["kind"] == "busy"
        assert "was not run" in call["error"]["message"] and "max_queue_wait" in call["error"]["message"]


@pytest.mark.parametrize("call_timeout", [2.5])
def test_a_calls_deadline_measures_its_own_run_not_its_wait_for_a_slot(session_factory: Any, tmp_path: Path,
                                                                     call_timeout: float) -> None:
    box = session_factory(config=str(config(tmp_path, concurrency=1, queue_wait=60)), tools=[],
                          notebook=tmp_path / "run.ipynb", call_timeout=call_timeout)
    # One slot, three calls of 1.5 s each: the last is answered about 4.5 s after it was made, past the 2.5 s
    # deadline, and still succeeds, since it ran for 1.5 s.
    queued = box.execute(GATHER.format(seconds=1.5, count=3))
    assert queued.stdout.strip() == str(["done"] * 3), queued.text
