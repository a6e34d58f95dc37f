"""The kernelspec launcher's inputs: the frontend's connection file and the restart state it keeps."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.sandbox.kernelspec import CellgateSpecManager, spec_dict
from cellgate.gate.session import launcher_state
from cellgate.gate.session.launcher import read_connection_file
from cellgate.gate.session.launcher_state import LaunchState, UntrustedState

GOOD = {"shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003, "control_port": 5004, "hb_port": 5005,
        "ip": "127.0.0.1", "key": "k", "transport": "tcp", "signature_scheme": "hmac-sha256", "kernel_name": "x"}


def test_the_installed_spec_is_a_plain_kernel_command_and_sessions_still_get_the_provisioner() -> None:
    spec = spec_dict()
    assert spec["argv"][1:] == ["-m", "cellgate.gate.session.launcher", "-f", "{connection_file}"]
    assert os.path.isabs(spec["argv"][0]) and "kernel_provisioner" not in spec["metadata"]
    in_process = CellgateSpecManager().get_kernel_spec("cellgate")
    assert in_process.metadata["kernel_provisioner"] == {"provisioner_name": "cellgate-gvisor"}


def test_a_connection_file_is_read_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "kernel.json"
    path.write_text(json.dumps(GOOD))
    assert read_connection_file(path) == GOOD
    path.write_text(json.dumps({**GOOD, "shell_port": "5001", "signature_scheme": "hmac-md5",
                                "curve_publickey": "x", "curve_secretkey": "y"}))
    with pytest.raises(ConfigError) as caught:
        read_connection_file(path)
    assert str(caught.value) == (f"connection file {path}: unusable signature_scheme 'hmac-md5' (only hmac-sha256), "
                                 "CurveZMQ keys (transport encryption is not supported by this kernel), "
                                 "shell_port '5001'")
    with pytest.raises(ConfigError, match="cannot be read"):
        read_connection_file(tmp_path / "missing.json")


def test_the_restart_state_round_trips_and_is_private(tmp_path: Path) -> None:
    path = launcher_state.state_path(tmp_path / "kernel-1.json", tmp_path / "state")
    assert launcher_state.load(path) is None
    state = LaunchState(str(tmp_path / "kernel-1.json"), str(tmp_path / "run.ipynb"), "restart")
    launcher_state.save(path, state)
    assert launcher_state.load(path) == state
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("plant", ["mode", pytest.param("owner", marks=pytest.mark.root_only(
    "it gives the file to another user")), "link", "shape", "folder"])
def test_a_planted_restart_state_is_not_trusted(tmp_path: Path, plant: str) -> None:
    path = launcher_state.state_path(tmp_path / "kernel-1.json", tmp_path / "state")
    launcher_state.save(path, LaunchState(str(tmp_path / "kernel-1.json"), str(tmp_path / "run.ipynb"), None))
    if plant == "mode":
        path.chmod(0o644)
    elif plant == "owner":
        os.chown(path, 1000, 1000)
    elif plant == "link":
        target = tmp_path / "elsewhere.json"
        target.write_text(path.read_text())
        target.chmod(0o600)
        path.unlink()
        path.symlink_to(target)
    elif plant == "shape":
        path.write_text(json.dumps({"notebook": 3}))
    elif plant == "folder":
        path.parent.chmod(0o777)
    with pytest.raises(UntrustedState):
        launcher_state.load(path)


def test_the_state_of_a_kernel_whose_connection_file_is_gone_is_forgotten(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    live, gone = tmp_path / "kernel-live.json", tmp_path / "kernel-gone.json"
    live.write_text("{}")
    for connection in (live, gone):
        launcher_state.save(launcher_state.state_path(connection, folder),
                            LaunchState(str(connection), str(tmp_path / "run.ipynb"), "kernel-died"))
    launcher_state.prune(folder)
    assert sorted(folder.iterdir()) == [launcher_state.state_path(live, folder)]
