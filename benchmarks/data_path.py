"""Large tool results (issue 33): a result through the gate against the same bytes over a plain ipykernel comm.

cellgate: a tool returns a list of records of about ``mb`` MB of JSON; the time is the call as the cell sees it
(request on the comm, the gate's decision, journal, the tool, encoding, the reply, decoding in the kernel), the
previous call's result freed before the clock starts.
Baseline: a plain local ipykernel with a comm target; the client sends the same records in one comm_msg, the
kernel decodes it and answers with an ack: the same bytes, host to kernel and back, with no gate and no sandbox.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from jupyter_client import AsyncKernelManager

from cellgate.gate import Session

ROW = {"id": 0, "customer": "ALFKI", "carrier": "NorthPost", "amount": 1234.5, "note": "x" * 40}
TOOLS = '''
import json

_ROW = {row!r}
_CACHE = {{}}


def blob(mb: int) -> list:
    """About mb MB of JSON records.

    Args:
        mb: megabytes
    """
    if mb not in _CACHE:
        count = mb * (1 << 20) // len(json.dumps(_ROW))
        _CACHE[mb] = [dict(_ROW, id=i) for i in range(count)]
    return _CACHE[mb]
'''

# The previous result is freed before the clock starts: freeing 10 MB of objects (~20 ms in gVisor) is the cell's own
# assignment, not the data path, and the baseline's kernel frees its copy after its ack, untimed.
CELL = """
import time
times = []
rows = None
for _ in range({calls}):
    rows = None
    t = time.perf_counter(); rows = tools.blob({mb}); times.append(time.perf_counter() - t)
print(' '.join(f'{{x * 1000:.3f}}' for x in times))
"""

TARGET = """
def _bench_target(comm, open_msg):
    @comm.on_msg
    def _got(msg):
        comm.send({"ack": len(msg["content"]["data"]["rows"])})
get_ipython().kernel.comm_manager.register_target("bench", _bench_target)
"""


def rows_of(mb: int) -> list[dict[str, Any]]:
    count = mb * (1 << 20) // len(json.dumps(ROW))
    return [dict(ROW, id=i) for i in range(count)]


async def plain_comm(mb: int, calls: int) -> list[float]:
    km = AsyncKernelManager(kernel_name="python3")
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        await kc.execute_interactive(TARGET, timeout=30, output_hook=lambda m: None)
        comm_id = uuid.uuid4().hex
        kc.shell_channel.send(kc.session.msg("comm_open", {"comm_id": comm_id, "target_name": "bench", "data": {}}))
        rows = rows_of(mb)
        times = []
        for _ in range(calls + 1):
            started = time.perf_counter()
            kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": comm_id, "data": {"rows": rows}}))
            while True:
                msg = await kc.get_iopub_msg(timeout=60)
                if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == comm_id:
                    assert msg["content"]["data"]["ack"] == len(rows)
                    break
            times.append((time.perf_counter() - started) * 1000)
        return times[1:]  # the first warms both ends
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


async def through_gate(folder: Path, mb: int, calls: int) -> list[float]:
    tools = folder / "blob_tools.py"
    tools.write_text(TOOLS.format(row=ROW))
    async with Session(tools=[str(tools)], notebook=folder / f"blob-{mb}.ipynb", cwd=folder) as session:
        warm = await session.execute(CELL.format(calls=1, mb=mb))
        assert warm.ok, warm.text
        result = await session.execute(CELL.format(calls=calls, mb=mb))
        assert result.ok, result.text
        return [float(x) for x in result.stdout.split()]


async def data_path(folder: Path, calls: int) -> dict[str, list[float]]:
    out = {"plain_1": await plain_comm(1, calls), "gate_1": await through_gate(folder, 1, calls),
           "gate_10": await through_gate(folder, 10, max(6, calls // 2))}
    out["gate_10_mbps"] = [10 * 1000 / ms for ms in out["gate_10"]]
    return out


def rows(measured: dict[str, list[float]], row: Any) -> list[dict[str, Any]]:
    return [
        row("1 MB over a plain ipykernel comm, round trip", measured["plain_1"]),
        row("1 MB tool result through the gate (goal <= 2)", measured["gate_1"], baseline=measured["plain_1"]),
        row("10 MB tool result through the gate", measured["gate_10"]),
        row("10 MB results, throughput (goal >= 100)", measured["gate_10_mbps"], unit="MB/s"),
    ]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        measured = asyncio.run(data_path(Path(tmp), 10))
    for name, values in measured.items():
        print(name, sorted(values)[len(values) // 2])
