"""``cellgate exec --trial``: a discarded trial does not stop exec; each program is tried, from the session as it
was (issue 43, item 1). Real gVisor sandboxes and checkpoints; ``cellgate show`` reads the record's notes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import cellgate


def test_exec_goes_on_after_a_discarded_trial_and_says_a_trial_failed(tmp_path: Path) -> None:
    (tmp_path / "load.py").write_text("total = 1\nprint('loaded', total)\n")
    (tmp_path / "bad.py").write_text("total = 100\n1 / 0\n")
    (tmp_path / "good.py").write_text("total = total + 1\nprint('total', total)\n")
    done = cellgate("exec", "--trial", "load.py", "bad.py", "good.py", "--notebook", "tr.ipynb", cwd=tmp_path)
    # the 3rd program ran after the 2nd was discarded, on the session as it was before the 2nd (total 1, not 100)
    assert done.stdout == "loaded 1\ntotal 2\n", done.stderr
    assert done.returncode == 1, done.stderr  # a trial was discarded
    said = " ".join(done.stderr.split())
    assert "trial load.py: kept" in said and "trial bad.py: discarded" in said and "trial good.py: kept" in said
    # show lists each record's trial notes and where the session went on; the chain is followed through them
    notes, notebook, seen = [], "tr.ipynb", []
    while notebook:
        seen.append(notebook)
        shown = cellgate("show", notebook, cwd=tmp_path)
        assert shown.returncode == 0 and "trial " in shown.stdout, shown.stdout + shown.stderr
        data = json.loads(cellgate("show", "--json", notebook, cwd=tmp_path).stdout)
        notes += [n["kind"] for n in data["notes"] if n["kind"].startswith("trial-")]
        notebook = next((n["notebooks"][0] for n in data["notes"] if n["kind"] == "session-ended"), "")
        assert len(seen) <= 3 and notebook not in seen
    assert notes == ["trial-kept", "trial-discarded", "trial-kept"]
