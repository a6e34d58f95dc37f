"""Sandbox images (issue 32): the data image does real data work, sees nothing of the host, and the record names it.

The ``data`` image is built here if this machine has not built it yet (``cellgate image build data``: a no-op
when it has, which one test shows).
"""

from __future__ import annotations

import csv
import io
import json
import random
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import cellgate

from cellgate.gate.sandbox.images import build, store
from cellgate.gate.sandbox.images.spec import PROFILES
from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.xdist_group("data-image")  # one worker builds it, if it is not built yet

REGIONS = ("north", "south", "east", "west", "central")


@pytest.fixture(scope="module")
def data_image() -> store.Image:
    image, _built = build.build(PROFILES["data"])
    return image


def sales_csv(rows: int) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """A CSV of ``rows`` sales and its totals per region (count, sum), worked out here without pandas."""
    chance = random.Random(32)
    totals: dict[str, tuple[int, int]] = {}
    out = io.StringIO()
    out.write("order_id,region,amount\n")
    for order in range(rows):
        region, amount = chance.choice(REGIONS), chance.randrange(1, 10_000)
        count, total = totals.get(region, (0, 0))
        totals[region] = (count + 1, total + amount)
        out.write(f"{order},{region},{amount}\n")
    return out.getvalue().encode(), totals


def run(box: BlockingSession, code: str) -> Any:
    result = box.execute(code)
    assert result.ok, result.text
    return result


def test_in_the_data_image_pandas_aggregates_an_uploaded_csv_charts_it_and_the_result_comes_back(
        session_factory: Any, data_image: store.Image) -> None:
    box = session_factory(tools=[], image="data")
    data, totals = sales_csv(200_000)
    box._run(box.session.upload("sales.csv", data))
    run(box, """
import pandas as pd
sales = pd.read_csv("sales.csv")
totals = sales.groupby("region")["amount"].agg(["count", "sum"]).reset_index()
totals.to_csv("totals.csv", index=False)
print(len(sales))
""")
    chart = run(box, """
import matplotlib.pyplot as plt
plt.bar(totals["region"], totals["sum"])
plt.title("sales by region")
plt.show()
""")
    pngs = [o for o in chart.outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 1, chart.outputs
    assert "Fontconfig" not in json.dumps(chart.outputs)
    back = box._run(box.session.download("totals.csv")).decode()
    got = {row["region"]: (int(row["count"]), int(row["sum"])) for row in csv.DictReader(io.StringIO(back))}
    assert got == totals

    # Nothing of the host's Python: not the gate, not the host's interpreter or its venv.
    host_paths = sorted({str(Path(p)) for p in (store.kernel_slice().parent.parent, *_host_prefixes())})
    seen = json.loads(run(box, f"""
import importlib.util, json, os, sys
print(json.dumps({{"gate": importlib.util.find_spec("cellgate.gate") is not None,
                  "host_paths": [p for p in {host_paths!r} if os.path.exists(p)],
                  "executable": sys.executable, "path": sys.path}}))
""").stdout)
    assert seen["gate"] is False
    assert seen["host_paths"] == []
    assert seen["executable"] == data_image.python
    assert not any(part.startswith(tuple(host_paths)) for part in seen["path"]), seen["path"]

    # The audit notebook names the image: its digest and every locked package with its hash.
    recorded = nbformat.read(box.session.notebook_path, as_version=4).metadata.cellgate.sandbox.image
    assert recorded["name"] == "data" and recorded["digest"] == data_image.digest
    locked = {p["name"]: (p["version"], p["sha256"]) for p in recorded["python_packages"]}
    assert {"pandas", "numpy", "matplotlib", "pyarrow", "scipy", "scikit-learn", "polars"} <= set(locked)
    assert locked == {p["name"]: (p["version"], p["sha256"]) for p in data_image.manifest["python_packages"]}
    pandas_version = run(box, "import pandas; print(pandas.__version__)").stdout.strip()
    assert locked["pandas"][0] == pandas_version


def _host_prefixes() -> list[str]:
    import sys

    return [sys.prefix, sys.base_prefix]


def test_a_second_build_of_the_same_spec_is_a_no_op_and_list_shows_both_profiles(data_image: store.Image) -> None:
    again = cellgate("image", "build", "data")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"data is up to date: sha256:{data_image.digest}")
    listed = [json.loads(line) for line in cellgate("image", "list", "--json").stdout.splitlines()]
    names = {row["name"]: row["digest"] for row in listed}
    assert names["data"] == f"sha256:{data_image.digest}"
    minimal = store.resolve("minimal")
    assert names["minimal"] == f"sha256:{minimal.digest}" != names["data"]


def test_replay_in_another_image_says_what_differs_and_refuses_unless_allowed(
        session_factory: Any, data_image: store.Image, tmp_path: Path) -> None:
    box = session_factory(tools=[], notebook=tmp_path / "run.ipynb")  # the default image: minimal
    run(box, "print(6 * 7)")
    box.close()
    config = tmp_path / "elsewhere" / "cellgate.toml"
    config.parent.mkdir()
    config.write_text('[sandbox]\nimage = "data"\n')
    refused = cellgate("replay", str(tmp_path / "run.ipynb"), "--config", str(config),
                       "--notebook", str(tmp_path / "replay.ipynb"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "the run was recorded in the image minimal sha256:" in refused.stderr
    assert f"this replay runs in data sha256:{data_image.digest[:16]}" in refused.stderr
    assert "pandas (absent) -> " in refused.stderr and "--allow-other-image" in refused.stderr
    assert "cell 1" not in refused.stdout  # refused before any recorded cell ran
    allowed = cellgate("replay", str(tmp_path / "run.ipynb"), "--config", str(config), "--allow-other-image",
                       "--notebook", str(tmp_path / "replay2.ipynb"))
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "cell 1: recorded ok, replayed ok" in allowed.stdout
