"""Golden files: compare a test's text with its reviewed snapshot, or write it when asked.

``CELLGATE_UPDATE_SNAPSHOTS=1`` writes the snapshot and fails the test (a run that writes a snapshot never
passes); review ``git diff tests/golden/snapshots``, then rerun without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SNAPSHOTS


def matches_snapshot(path: Path, text: str, what: str) -> None:
    """``text`` is ``path``'s snapshot; ``what`` names what drifted in the failure (e.g. "`cellgate show`")."""
    shown = path.relative_to(SNAPSHOTS)
    if os.environ.get("CELLGATE_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        pytest.fail(f"wrote snapshots/{shown}; review `git diff tests/golden/snapshots`, then rerun without "
                    "CELLGATE_UPDATE_SNAPSHOTS (a run that writes the snapshot never passes)")
    assert path.is_file(), f"no snapshot {shown}; write it with CELLGATE_UPDATE_SNAPSHOTS=1 and review it"
    assert text == path.read_text(), f"{what} drifted from {shown}; review, then rerun with CELLGATE_UPDATE_SNAPSHOTS=1"
