"""Issue 29 item 10: the JupyterLab server extension says which audit notebook a live cellgate kernel records to,
from host state only (the launcher's own state file, keyed by the connection file the server wrote), and a run
that is still going verifies as "running", not as a failure, while every other problem stands.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# The JupyterLab extension is installed by scripts/setup; the ordinary user's leg, which does not install it, leaves
# this file out by name (scripts/test-as-user), so it never skips.
from cellgate_jupyterlab.handlers import shown, shown_lines
from cellgate_jupyterlab.live import live_run, verify_reply

from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.audit.verify import check_run
from cellgate.gate.sandbox.kernelspec import launcher_argv
from cellgate.gate.session import launcher_state
from cellgate.gate.session.launcher_state import LaunchState

CELLGATE_ARGV = launcher_argv()
PYTHON3_ARGV = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]


@pytest.fixture()
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Jupyter runtime folder of the test's own, where the launcher keeps its state."""
    folder = tmp_path / "runtime"
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(folder))
    return folder


def connection_file(tmp_path: Path, name: str = "kernel-1.json") -> Path:
    path = tmp_path / name
    path.write_text("{}")
    return path


def launcher_saved(connection: Path, notebook: Path, ended: launcher_state.Ending | None = None) -> None:
    """What a launcher serving ``connection`` saves (launcher.py) once its record is open."""
    launcher_state.save(launcher_state.state_path(connection),
                        LaunchState(str(connection.resolve()), str(notebook), ended))


def test_a_kernel_that_is_not_cellgates_is_said_to_be_none(runtime: Path, tmp_path: Path) -> None:
    connection = connection_file(tmp_path)
    launcher_saved(connection, tmp_path / "run.ipynb")
    assert live_run(PYTHON3_ARGV, str(connection), tmp_path) == {"cellgate": False}
    assert live_run([], str(connection), tmp_path) == {"cellgate": False}


def test_the_audit_notebook_of_a_live_kernel_comes_from_the_launchers_state(runtime: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "live" / "runs").mkdir(parents=True)
    connection = connection_file(tmp_path)
    assert live_run(CELLGATE_ARGV, str(connection), root)["state"] == "starting"  # nothing saved yet

    notebook = root / "live" / "runs" / "a.ipynb"
    notebook.write_text("{}")
    launcher_saved(connection, notebook)
    run = live_run(CELLGATE_ARGV, str(connection), root)
    assert run == {"cellgate": True, "state": "running", "notebook": str(notebook), "path": "live/runs/a.ipynb",
                   "ended": None, "problem": None}

    launcher_saved(connection, notebook, "restart")  # between a restart's two launcher processes
    assert live_run(CELLGATE_ARGV, str(connection), root)["state"] == "restarting"


def test_an_audit_notebook_outside_the_root_is_a_path_with_no_link(runtime: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "audit" / "a.ipynb"
    outside.parent.mkdir()
    outside.write_text("{}")
    (root / "looks-inside.ipynb").symlink_to(outside)
    connection = connection_file(tmp_path)
    launcher_saved(connection, outside)
    run = live_run(CELLGATE_ARGV, str(connection), root)
    assert (run["state"], run["notebook"], run["path"]) == ("running", str(outside), None)
    launcher_saved(connection, root / "looks-inside.ipynb")  # resolved: still outside
    assert live_run(CELLGATE_ARGV, str(connection), root)["path"] is None
    launcher_saved(connection, Path("looks-inside.ipynb"))  # not a path the launcher writes: never linked
    assert live_run(CELLGATE_ARGV, str(connection), root)["path"] is None


def test_only_the_state_of_this_kernels_own_connection_file_counts(runtime: Path, tmp_path: Path) -> None:
    mine, other = connection_file(tmp_path, "kernel-1.json"), connection_file(tmp_path, "kernel-2.json")
    launcher_saved(other, tmp_path / "other.ipynb")
    assert live_run(CELLGATE_ARGV, str(mine), tmp_path)["state"] == "starting"
    # A state file under this kernel's name that names another connection file is not this kernel's.
    launcher_state.save(launcher_state.state_path(mine),
                        LaunchState(str(other.resolve()), str(tmp_path / "other.ipynb"), None))
    assert live_run(CELLGATE_ARGV, str(mine), tmp_path)["state"] == "starting"


def test_a_state_file_others_could_write_is_not_trusted_and_says_why(runtime: Path, tmp_path: Path) -> None:
    connection = connection_file(tmp_path)
    launcher_saved(connection, tmp_path / "run.ipynb")
    os.chmod(runtime / "cellgate", 0o755)
    run = live_run(CELLGATE_ARGV, str(connection), tmp_path)
    assert (run["state"], run["notebook"], run["path"]) == ("unknown", None, None), run
    assert "cannot be trusted" in run["problem"] and "mode 755" in run["problem"], run["problem"]


def test_a_run_still_recorded_by_a_live_kernel_is_running_not_failed(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "run.ipynb", {})  # open: its journal has no session-ended yet
    try:
        result = check_run(tmp_path / "run.ipynb")
        assert result.unended is not None and result.problems == [result.unended], result.problems
        assert "without a session-ended or recovered record" in result.unended
        live = verify_reply(result, recorded_live=True)
        assert (live["running"], live["problems"], live["ok"]) == (True, [], False)
        # Not recorded by a live kernel of this server: the missing ending is the problem it was.
        assert verify_reply(result, recorded_live=False)["problems"] == [result.unended]

        # Any other problem of a running run still fails it.
        nb = json.loads((tmp_path / "run.ipynb").read_text())
        nb["metadata"]["cellgate"]["session_id"] = "forged"
        (tmp_path / "forged.ipynb").write_text(json.dumps(nb))
        (tmp_path / "forged.journal.jsonl").write_bytes((tmp_path / "run.journal.jsonl").read_bytes())
        forged = verify_reply(check_run(tmp_path / "forged.ipynb"), recorded_live=True)
        assert forged["running"] and forged["problems"], forged
        assert all("session-ended" not in p for p in forged["problems"]), forged["problems"]
    finally:
        recorder.close()
    ended = check_run(tmp_path / "run.ipynb")
    assert ended.ok and ended.unended is None, ended.problems
    assert verify_reply(ended, recorded_live=True)["running"] is False


def test_the_server_side_shows_hidden_characters_as_cellgate_show_does() -> None:
    """Issue 30 item 4: approvals, verify problems and blobs reach the page with the escapes of the gate's one
    text-safety module (tests/unit/test_text_safety.py: the notebook's calls table, `show`, the report)."""
    hidden, escaped = "tool\U000e0041\u2800\u2003x", "tool\\U000e0041\\u2800\\u2003x"
    request = {"tool": hidden, "args": {hidden: [hidden, 1, None]}, "source_line": f"tools.{hidden}()"}
    assert shown(request) == {"tool": escaped, "args": {escaped: [escaped, 1, None]},
                              "source_line": f"tools.{escaped}()"}
    assert shown_lines(f'{{\n "x": "{hidden}"\n}}') == f'{{\n "x": "{escaped}"\n}}'  # its lines kept
