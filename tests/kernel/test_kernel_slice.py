"""The kernel slice (kernel/pyproject.toml, what the kernel image installs) installs and runs alone.

A fresh venv gets ``cellgate-kernel`` and its dependencies from the configured index (pip's cache makes it quick);
then the kernel serves a cell there as its pod runs it (``cellgate.extensions.kubernetes.manifests``: the pod's
command and environment, its Secret and ConfigMap laid out as mounted), over TCP with CurveZMQ keys.
"""

from __future__ import annotations

import base64
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


TOOLS = {"tools/__init__.py": '"""The tools of this session."""\nfrom . import crm\n',
         "tools/crm/__init__.py": 'NAME = "crm"\n'}


@pytest.fixture
def pod_kernel(slice_venv: Path, tmp_path: Path) -> Iterator[tuple[BlockingKernelClient, Path, Path]]:
    """The kernel as its pod runs it: the pod's command and environment, its Secret and ConfigMap laid out as the
    kubelet mounts them (under ``tmp_path``), Curve keys; bound to loopback on free ports instead of the pod's."""
    public, secret = zmq.curve_keypair()
    keys = manifests.KernelKeys(key=os.urandom(32).hex(), curve_publickey=public.decode(),
                                curve_secretkey=secret.decode())
    session = manifests.KernelSession(session_id="cg-slice", namespace="cellgate", image="cellgate/kernel",
                                      gate=manifests.GatePeer(namespace="cellgate"))
    pod = manifests.kernel_pod(session, TOOLS)
    (container,) = pod["spec"]["containers"]
    root = tmp_path / "pod"
    mounts = {m["name"]: root / m["mountPath"].lstrip("/") for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for key, data in manifests.connection_secret(session, keys)["data"].items():
        mounts["connection"].mkdir(parents=True, exist_ok=True)
        (mounts["connection"] / key).write_bytes(base64.b64decode(data))
    config_map = manifests.tools_config_map(session, TOOLS)
    for item in volumes["tools"]["configMap"]["items"]:
        (mounts["tools"] / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        (mounts["tools"] / item["path"]).write_text(config_map["data"][item["key"]])
    connection = mounts["connection"] / manifests.CONNECTION_KEY
    info = json.loads(connection.read_text())
    assert info["ip"] == "0.0.0.0" and info["transport"] == "tcp"
    connection.write_text(json.dumps({**info, "ip": "127.0.0.1", **{name: free_port() for name in manifests.PORTS}}))
    connection.chmod(0o400)  # read-only, as the pod's Secret is
    env = {name: str(root / value.lstrip("/")) if value.startswith("/") and name != "PATH" else value
           for name, value in manifests.kernel_environment(session).items()}
    env["PATH"] = f"{slice_venv / 'bin'}:{env['PATH']}"
    for name in ("tmp", "workspace"):
        mounts[name].mkdir(parents=True)
    argv = container["command"]
    argv[0] = str(slice_venv / "bin" / "python")
    argv[argv.index(manifests.CONNECTION_FILE)] = str(connection)
    log = tmp_path / "kernel.log"
    with log.open("w") as out:
        kernel = subprocess.Popen(argv, cwd=root / container["workingDir"].lstrip("/"), env=env, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    client = BlockingKernelClient()
    client.load_connection_file(str(connection))
    # No heartbeat channel: it calls a kernel dead that has not answered within 1 s, which a start can take.
    client.start_channels(hb=False)
    try:
        yield client, connection, log
    finally:
        client.stop_channels()
        kernel.kill()
        kernel.wait(timeout=30)


def test_the_slice_serves_a_cell_as_its_pod_runs_it_over_tcp_with_curve(
        pod_kernel: tuple[BlockingKernelClient, Path, Path], slice_venv: Path) -> None:
    client, connection, log = pod_kernel
    written = connection.read_bytes()
    try:
        client.wait_for_ready(timeout=60)
    except RuntimeError as exc:
        pytest.fail(f"the kernel did not start ({exc}); its output:\n{log.read_text()[-3000:]}")
    printed: list[str] = []
    reply = client.execute_interactive("import sys; print(sys.prefix); print(tools.crm.NAME)", timeout=60,
                                       output_hook=lambda msg: printed.append(msg["content"].get("text", "")))
    assert reply["content"]["status"] == "ok", reply["content"]
    # The slice's own interpreter, and the tools package from the ConfigMap's layout, preloaded as ``tools``.
    assert "".join(printed).split() == [str(slice_venv), "crm"]
    # Read-only in a pod (a Secret): the kernel must not rewrite it (ipykernel 7.4 would, with Curve keys).
    assert connection.read_bytes() == written
    # ipykernel says this on TCP without Curve; with the keys it encrypts instead.
    assert "without encryption" not in log.read_text()
