"""The data image against a plain ipykernel with the very same packages (issue 32's benchmark rows).

The baseline is Debian's own ``/usr/bin/python3`` (the interpreter the image has) running ipykernel from the data
image's own site-packages, with no sandbox and no gate: so a ratio is what gVisor, the gate and the record cost,
never a difference of package versions.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpecManager

from cellgate.gate import Session
from cellgate.gate.sandbox.images import build, store
from cellgate.gate.sandbox.images.spec import PROFILES

ROWS = 200_000
# The pandas workload a data engineer runs first: import, read and aggregate a CSV, chart it.
WORKLOAD = (
    "import pandas as pd\nimport matplotlib.pyplot as plt",
    "sales = pd.read_csv('sales.csv')\ntotals = sales.groupby('region')['amount'].agg(['count', 'sum'])",
    "plt.figure(); plt.bar(totals.index, totals['sum']); plt.show()",
)


def sales_csv() -> bytes:
    chance = random.Random(32)
    regions = ("north", "south", "east", "west", "central")
    lines = ["order_id,region,amount"] + [f"{i},{chance.choice(regions)},{chance.randrange(1, 10_000)}"
                                          for i in range(ROWS)]
    return ("\n".join(lines) + "\n").encode()


class SamePackagesKernel:
    """A local ipykernel on Debian's python3 with the data image's packages: the baseline."""

    def __init__(self, image: store.Image, folder: Path) -> None:
        specs = Path(tempfile.mkdtemp(dir=folder)) / "kernels" / "same-packages"
        specs.mkdir(parents=True)
        site = image.rootfs / build.SITE_PACKAGES.format(version=image.manifest["python_version"])
        (specs / "kernel.json").write_text(json.dumps({
            "argv": [f"/usr/bin/python{image.manifest['python_version']}", "-m", "ipykernel_launcher", "-f",
                     "{connection_file}"],
            "display_name": "same packages", "language": "python",
            "env": {"PYTHONPATH": str(site), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}}))
        self.cwd = folder
        self.km = AsyncKernelManager(kernel_name="same-packages",
                                     kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(specs.parent)]))

    async def start(self) -> float:
        started = time.perf_counter()
        await self.km.start_kernel(cwd=str(self.cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        await self.kc.wait_for_ready(timeout=60)
        return (time.perf_counter() - started) * 1000

    async def cell(self, code: str) -> float:
        started = time.perf_counter()
        reply = await self.kc.execute_interactive(code, timeout=120, output_hook=lambda m: None)
        assert reply["content"]["status"] == "ok", reply["content"]
        return (time.perf_counter() - started) * 1000

    async def stop(self) -> None:
        self.kc.stop_channels()
        await self.km.shutdown_kernel(now=True)


async def _cellgate_cell(session: Session, code: str) -> float:
    started = time.perf_counter()
    result = await session.execute(code)
    assert result.ok, result.text
    return (time.perf_counter() - started) * 1000


async def data_stack(folder: Path, rounds: int) -> dict[str, list[float]]:
    """Per round, alternating: a start and the workload in the baseline, then the same in a data-image session."""
    image, _ = build.build(PROFILES["data"])
    data = sales_csv()
    out: dict[str, list[float]] = {"plain_start": [], "data_start": [], "plain_work": [], "data_work": []}
    warm = Session(notebook=folder / "data-warm.ipynb", cwd=folder, image="data")  # its snapshot image exists
    await warm.start()
    await warm.shutdown()
    for attempt in range(rounds):
        work = folder / f"plain-{attempt}"
        work.mkdir()
        (work / "sales.csv").write_bytes(data)
        plain = SamePackagesKernel(image, work)
        out["plain_start"].append(await plain.start())
        out["plain_work"].append(sum([await plain.cell(code) for code in WORKLOAD]))
        await plain.stop()
        session = Session(notebook=folder / f"data-{attempt}.ipynb", cwd=folder, image="data")
        started = time.perf_counter()
        await session.start()
        out["data_start"].append((time.perf_counter() - started) * 1000)
        try:
            await session.upload("sales.csv", data)
            out["data_work"].append(sum([await _cellgate_cell(session, code) for code in WORKLOAD]))
        finally:
            await session.shutdown()
    return out


def rows(measured: dict[str, list[float]], row: Any) -> list[dict[str, Any]]:
    return [
        row("pandas workload (200k-row CSV), same packages, plain", measured["plain_work"]),
        row("pandas workload, cellgate data image (goal <= 1.5)", measured["data_work"], baseline=measured["plain_work"]),
        row("cold start, plain ipykernel (same packages)", measured["plain_start"]),
        row("cold start, cellgate data image (goal <= 1.5)", measured["data_start"], baseline=measured["plain_start"]),
    ]
