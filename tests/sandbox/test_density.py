"""What an idle session holds (issue 33): one reaper beside the host process for all its sandboxes, not one per
sandbox, and a kernel without debugpy until a frontend first debugs (the debugger still offered), so that an idle
session costs the host less memory. `benchmarks/density.py` measures the memory; this checks the parts."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from conftest import SAMPLE_TOOLS

from cellgate.gate import Session
from cellgate.gate.sandbox.runtime_dir import run_root

PROBE = ("import sys\nk = get_ipython().kernel\n"
         "print('debugpy' in sys.modules, 'debugger' in k.kernel_info['supported_features'], "
         "getattr(k, 'debugger', None) is None)")


def reapers_of(pid: int, root: Path) -> list[str]:
    """The reapers watching ``root`` for the process ``pid`` (another test of this process may have left one
    watching a run root of its own: one per process and run root, alive until the process ends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "reaper.py" in line and line.rstrip().endswith(f" {root} {pid}"):
                found.append(line)
    return found


def test_sessions_of_one_process_share_one_reaper_and_their_kernels_load_debugpy_only_when_asked(
        tmp_path: Path, runsc: object) -> None:
    async def run() -> tuple[list[str], list[str]]:
        sessions = [Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / f"s{i}.ipynb", cwd=tmp_path)
                    for i in range(3)]
        try:
            await asyncio.gather(*(s.start() for s in sessions))
            answers = [(await s.execute(PROBE)).stdout for s in sessions]
            return answers, reapers_of(os.getpid(), run_root())
        finally:
            await asyncio.gather(*(s.shutdown() for s in sessions), return_exceptions=True)

    answers, reapers = asyncio.run(run())
    assert len(reapers) == 1, reapers  # three sandboxes, one reaper
    # No debugpy loaded, the debugger offered, none made yet (the first debug_request makes it:
    # tests/sandbox/test_kernel_subshell_debug.py debugs through it).
    assert answers == ["False True True\n"] * 3, answers
