"""Where a sandboxed kernel spends its time: a sampling profile taken inside gVisor.

    .venv/bin/python benchmarks/profile_sandbox.py [--seconds 6]

py-spy cannot attach inside the sandbox (no ptrace there), so a thread in the
kernel samples every thread's stack every 2 ms with ``sys._current_frames``
while the host drives first trivial cells, then sequential gated calls. Prints,
for each workload, each kernel thread's busiest stacks (idle waits left out).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import tempfile
import time
from pathlib import Path

from cellgate.gate import Session

SAMPLER = r'''
import sys as _sys, threading as _threading, time as _time, collections as _collections
_stacks = _collections.Counter()
def _sample(stop_at):
    me = _threading.get_ident()
    names = {t.ident: t.name for t in _threading.enumerate()}
    while _time.perf_counter() < stop_at:
        for tid, frame in _sys._current_frames().items():
            if tid == me:
                continue
            stack = []
            while frame is not None and len(stack) < 8:
                stack.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})")
                frame = frame.f_back
            _stacks[(names.get(tid, str(tid)), " <- ".join(stack))] += 1
        _time.sleep(0.002)
_threading.Thread(target=_sample, args=(_time.perf_counter() + {seconds},), daemon=True).start()
'''
REPORT = "import json\nprint(json.dumps([[k[0], k[1], n] for k, n in _stacks.items()]))"
IDLE = ("select (", "wait (threading", "_watch_pipe_fd", "device (")
ECHO_TOOLS = 'def echo(text: str) -> str:\n    """Return text."""\n    return text\n'


def show(title: str, report: str, per_op: str) -> None:
    samples = json.loads(report)
    total = collections.Counter()
    for thread, _, n in samples:
        total[thread] += n
    print(f"\n## {title} ({per_op})\n")
    busy = sorted(((n, thread, stack) for thread, stack, n in samples if not stack.startswith(IDLE)), reverse=True)
    for n, thread, stack in busy[:12]:
        print(f"{100 * n / total[thread]:5.1f}% of {thread}: {stack}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "echo_tools.py").write_text(ECHO_TOOLS)
        async with Session(tools=[folder / "echo_tools.py"], notebook=folder / "p.ipynb", cwd=folder,
                           cell_timeout=120) as session:
            await session.execute(SAMPLER.replace("{seconds}", str(args.seconds + 0.5)))
            trips, started = [], time.perf_counter()
            while time.perf_counter() - started < args.seconds:
                t = time.perf_counter()
                await session.execute("1")
                trips.append((time.perf_counter() - t) * 1000)
            await asyncio.sleep(1)
            show("trivial cells", (await session.execute(REPORT)).stdout,
                 f"{len(trips)} cells, p50 {statistics.median(trips):.2f} ms")
            await session.execute(SAMPLER.replace("{seconds}", str(args.seconds + 0.5)))
            result = await session.execute(
                "import time as _t\n_times = []\n_start = _t.perf_counter()\n"
                f"while _t.perf_counter() - _start < {args.seconds}:\n"
                "    _s = _t.perf_counter(); tools.echo('x'); _times.append(_t.perf_counter() - _s)\n"
                "import statistics as _st\nprint(len(_times), _st.median(_times) * 1000)")
            count, p50 = result.stdout.split()
            await asyncio.sleep(1)
            show("sequential gated calls", (await session.execute(REPORT)).stdout,
                 f"{count} calls, p50 {float(p50):.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
