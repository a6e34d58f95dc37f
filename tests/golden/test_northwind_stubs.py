"""The generated `tools` package of the northwind example, against the reviewed snapshot in snapshots/.

Updating is its own step: ``CELLGATE_UPDATE_SNAPSHOTS=1`` writes the files and fails; review the diff and rerun.
"""

from __future__ import annotations

import os

import pytest
from conftest import NORTHWIND, SNAPSHOTS

from cellgate.gate.calls import stubgen
from cellgate.gate.calls.registry import ToolRegistry

SNAPSHOT = SNAPSHOTS / "northwind_tools"


def northwind_files() -> dict[str, str]:
    return stubgen.generate(ToolRegistry.from_paths([NORTHWIND / "tools.py"]).manifest())


def test_northwind_stubs_match_the_snapshot() -> None:
    files = northwind_files()
    if os.environ.get("CELLGATE_UPDATE_SNAPSHOTS") == "1":
        for name, text in files.items():
            (SNAPSHOT / name).parent.mkdir(parents=True, exist_ok=True)
            (SNAPSHOT / name).write_text(text)
        pytest.fail("wrote tests/golden/snapshots/northwind_tools; review `git diff tests/golden/snapshots`, then "
                    "rerun without CELLGATE_UPDATE_SNAPSHOTS (a run that writes the snapshot never passes)")
    assert sorted(files) == sorted(str(p.relative_to(SNAPSHOT)) for p in SNAPSHOT.rglob("*.py"))
    for name, text in files.items():
        assert text == (SNAPSHOT / name).read_text(), (
            f"{name} drifted from tests/golden/snapshots; review the change, then rerun with "
            "CELLGATE_UPDATE_SNAPSHOTS=1")
