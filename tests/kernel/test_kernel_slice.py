"""The kernel slice (kernel/pyproject.toml, what the kernel image installs) installs and runs alone.

A fresh venv gets ``cellgate-kernel`` and its dependencies from the configured index (pip's cache makes it quick);
then the kernel serves a cell there, started with the kernel pod's own command
(``cellgate.extensions.kubernetes.manifests.kernel_argv``) over TCP with CurveZMQ keys, as in a pod.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from conftest import ROOT, free_port
from jupyter_client import BlockingKernelClient

from cellgate.extensions.kubernetes import manifests


@pytest.fixture(scope="module")
def slice_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("slice") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    # This venv's pip installs into the fresh one (--python): the same index and cache, no pip copied in.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet", "--no-compile",
         "--disable-pip-version-check", str(ROOT / "kernel")],
        capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"the kernel slice did not install:\n{done.stderr[-3000:]}"
    return venv


def alone(venv: Path, cwd: Path) -> dict[str, str]:
    """An environment that reaches nothing of this checkout: no PYTHONPATH, no editable install."""
    return {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8",
            "JUPYTER_RUNTIME_DIR": str(cwd / "jupyter"), "IPYTHONDIR": str(cwd / "ipython"),
            "JUPYTER_PLATFORM_DIRS": "1"}


def test_the_slice_holds_the_kernel_and_nothing_of_the_gate(slice_venv: Path, tmp_path: Path) -> None:
    probe = ("import importlib.util, cellgate.kernel.kernel, cellgate.kernel\n"
             "print(cellgate.kernel.__file__)\n"
             "print([importlib.util.find_spec(n) for n in ('cellgate.gate', 'cellgate.extensions')])\n")
    done = subprocess.run([str(slice_venv / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, env=alone(slice_venv, tmp_path), timeout=60)
    assert done.returncode == 0, done.stderr
    where, gate = done.stdout.splitlines()
    assert where.startswith(str(slice_venv)) and gate == "[None, None]"


@pytest.fixture
def curve_kernel(slice_venv: Path, tmp_path: Path) -> Iterator[tuple[BlockingKernelClient, Path, Path]]:
    public, secret = zmq.curve_keypair()
    keys = manifests.KernelKeys(key=os.urandom(32).hex(), curve_publickey=public.decode(),
                                curve_secretkey=secret.decode())
    info = {**manifests.connection_file(keys, ip="127.0.0.1"), **{name: free_port() for name in manifests.PORTS}}
    connection = tmp_path / "kernel.json"
    connection.write_text(json.dumps(info))
    connection.chmod(0o400)  # read-only, as the pod's Secret is
    argv = manifests.kernel_argv()
    argv[0] = str(slice_venv / "bin" / "python")
    argv[argv.index(manifests.CONNECTION_FILE)] = str(connection)
    log = tmp_path / "kernel.log"
    with log.open("w") as out:
        kernel = subprocess.Popen(argv, cwd=tmp_path, env=alone(slice_venv, tmp_path), stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    client = BlockingKernelClient()
    client.load_connection_file(str(connection))
    client.start_channels()
    try:
        yield client, connection, log
    finally:
        client.stop_channels()
        kernel.kill()
        kernel.wait(timeout=30)


def test_the_slice_serves_a_cell_over_tcp_with_curve_leaving_its_connection_file_alone(
        curve_kernel: tuple[BlockingKernelClient, Path, Path], slice_venv: Path) -> None:
    client, connection, log = curve_kernel
    written = connection.read_bytes()
    client.wait_for_ready(timeout=60)
    printed: list[str] = []
    reply = client.execute_interactive("import sys; print(sys.prefix)", timeout=60,
                                       output_hook=lambda msg: printed.append(msg["content"].get("text", "")))
    assert reply["content"]["status"] == "ok", reply["content"]
    assert "".join(printed).strip() == str(slice_venv)
    # Read-only in a pod (a Secret): the kernel must not rewrite it (ipykernel 7.4 would, with Curve keys).
    assert connection.read_bytes() == written
    # ipykernel says this on TCP without Curve; with the keys it encrypts instead.
    assert "without encryption" not in log.read_text()
