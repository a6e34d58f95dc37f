"""A sandbox backend other than ``local``, through the ``cellgate.sandbox_backends`` seam, as a remote one is seen.

``TcpCurve`` is the least a remote backend (Kubernetes: a gVisor pod) gives the gate: a kernel it did not start as
its own child, reachable only over TCP with CurveZMQ and the HMAC key, no host process to poll (the provisioner
asks the backend), an interrupt on the control channel, and a memory death that only the backend's ``wait`` can
tell (a pod's ``OOMKilled``). Here the kernel is a local subprocess (the kernel tier: nothing isolates it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from conftest import free_port
from jupyter_client.session import Session
from zmq.utils.monitor import recv_monitor_message

from cellgate.gate import SandboxError
from cellgate.gate.ext import CURVE_SERVER_KEY, SandboxBackend, SandboxHandle, SandboxRequest, SandboxStatus
from cellgate.gate.sandbox.backend import BACKENDS_GROUP, CHANNELS, endpoint
from cellgate.gate.sandbox.container import kernel_python_path
from cellgate.kernel import wire


def kernel_info(info: dict[str, Any], timeout: float) -> None:
    """Wait for the kernel's kernel_info reply on shell, over Curve: it is ready once it answers."""
    session = Session(key=info["key"].encode(), signature_scheme="hmac-sha256")
    with zmq.Context() as ctx, ctx.socket(zmq.DEALER) as shell:
        shell.linger = 0
        shell.curve_publickey, shell.curve_secretkey = zmq.curve_keypair()
        shell.curve_serverkey = info[CURVE_SERVER_KEY].encode()
        shell.connect(endpoint(info, "shell"))
        session.send(shell, "kernel_info_request", {})
        if not shell.poll(int(timeout * 1000)):
            raise SandboxError(f"the kernel did not answer kernel_info within {timeout:g} s")
        session.recv(shell)


class TcpCurveHandle(SandboxHandle):
    def __init__(self, backend: TcpCurve, request: SandboxRequest, folder: Path, info: dict[str, Any],
                 kernel: subprocess.Popen[bytes]) -> None:
        super().__init__(folder.name, backend, request)
        self.folder, self.info, self.kernel = folder, info, kernel
        self.killed = False  # by the backend (the host's kill): not a memory death


class TcpCurve(SandboxBackend):
    name = "tcp-curve"

    def runtime(self) -> dict[str, Any]:
        return {"backend": self.name, "runtime": "a local subprocess (the kernel tier's stand-in for a pod)",
                "limits_enforced": "by the stand-in: none"}

    def start(self, request: SandboxRequest) -> SandboxHandle:
        folder = Path(tempfile.mkdtemp(prefix="cg-tcp-"))
        for relative, source in request.tools_files.items():
            target = folder / "tools" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source)
        public, secret = zmq.curve_keypair()
        info = {**{f"{c}_port": free_port() for c in CHANNELS}, "transport": "tcp", "ip": "127.0.0.1",
                "key": request.key, "signature_scheme": "hmac-sha256", "kernel_name": "cellgate",
                CURVE_SERVER_KEY: public.decode()}
        (folder / "kernel.json").write_text(json.dumps({**info, "curve_secretkey": secret.decode()}))
        env = request.kernel_environment([kernel_python_path()])
        env["PYTHONPATH"] = os.pathsep.join([str(folder / "tools"), kernel_python_path()])
        for name in ("HOME", "TMPDIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR", "XDG_CACHE_HOME"):
            env[name] = str(folder)
        env[wire.ENV_OUTPUT_LOG] = str(folder / "output.log")
        kernel = subprocess.Popen(
            [sys.executable, "-m", "cellgate.kernel", "-f", str(folder / "kernel.json"),
             "--HistoryManager.hist_file=:memory:", "--IPKernelApp.parent_handle=0"],
            env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
        handle = TcpCurveHandle(self, request, folder, info, kernel)
        try:
            kernel_info(info, request.config.start_timeout)
        except BaseException:
            self.delete(handle)
            raise
        return handle

    def connection_info(self, handle: SandboxHandle) -> dict[str, Any]:
        assert isinstance(handle, TcpCurveHandle)
        return dict(handle.info)

    def kill(self, handle: SandboxHandle) -> None:
        assert isinstance(handle, TcpCurveHandle)
        handle.killed = True
        if handle.kernel.poll() is None:
            handle.kernel.kill()

    def wait(self, handle: SandboxHandle) -> SandboxStatus:
        assert isinstance(handle, TcpCurveHandle)
        code = handle.kernel.wait()
        # Killed by something other than the backend: as a pod's container that the kubelet reports OOMKilled.
        memory = code == -signal.SIGKILL and not handle.killed
        return SandboxStatus("memory" if memory else "exited", code, "OOMKilled" if memory else "")

    def status(self, handle: SandboxHandle) -> SandboxStatus:
        assert isinstance(handle, TcpCurveHandle)
        return SandboxStatus("running") if handle.kernel.poll() is None else self.wait(handle)

    def delete(self, handle: SandboxHandle) -> None:
        assert isinstance(handle, TcpCurveHandle)
        self.kill(handle)
        handle.kernel.wait()
        shutil.rmtree(handle.folder, ignore_errors=True)

    def reap(self) -> list[str]:
        return []

    def describe(self, handle: SandboxHandle) -> dict[str, Any]:
        return {"backend": self.name, "id": handle.id, "transport": "tcp", "encryption": "curve"}


@pytest.fixture(scope="module")
def remote(session_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A session on the ``tcp-curve`` backend, installed as an extension's would be (an entry point)."""
    site = tmp_path_factory.mktemp("site")
    info = site / "tcpcurve-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tcpcurve\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{BACKENDS_GROUP}]\ntcp-curve = {__name__}:TcpCurve\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(site))
        yield session_factory(backend="tcp-curve", cell_timeout=2.0, interrupt_grace=30.0)


def journal(box: Any) -> list[dict[str, Any]]:
    path = box.session.notebook_path.with_name(box.session.notebook_path.stem + ".journal.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cells_and_gated_calls_run_over_tcp_with_curve(remote: Any) -> None:
    result = remote.execute("print(tools.add(2, b=40))")
    assert result.ok and result.stdout == "42\n" and [c.tool for c in result.calls] == ["add"]
    provisioner = remote.session.provisioner
    assert provisioner.sandbox is None and provisioner.handle.process is None  # no local sandbox, no process
    attached = [r for r in journal(remote) if r.get("event") == "kernel-attached"]
    assert attached[-1]["sandbox"] == {"backend": "tcp-curve", "id": provisioner.handle.id, "transport": "tcp",
                                       "encryption": "curve"}
    recorded = provisioner.started.recorder.metadata["sandbox"]
    assert recorded["backend"] == "tcp-curve" and recorded["limits_enforced"] == "by the stand-in: none"


def test_the_kernel_refuses_a_connection_without_curve(remote: Any) -> None:
    handle = remote.session.provisioner.handle
    info = handle.backend.connection_info(handle)
    with zmq.Context() as ctx, ctx.socket(zmq.DEALER) as plain:
        plain.linger = 0
        monitor = plain.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_SUCCEEDED)
        plain.connect(endpoint(info, "shell"))
        assert monitor.poll(30_000), "no handshake outcome"
        event = recv_monitor_message(monitor)
        assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        assert event["value"] == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
        plain.disable_monitor()
        monitor.close(linger=0)


def test_a_cell_past_its_timeout_is_interrupted_on_the_control_channel(remote: Any) -> None:
    assert remote.execute("kept = 1").ok
    result = remote.execute("import time\nwhile True:\n    time.sleep(0.05)")
    assert result.status == "timeout"
    assert remote.execute("print(kept)").stdout == "1\n"  # interrupted, not restarted


def test_a_memory_death_the_backend_reports_restarts_the_session(remote: Any) -> None:
    before = remote.session.provisioner.handle.id
    assert remote.execute("orders = [1, 2, 3]").ok
    result = remote.execute("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert result.status == "memory" and result.error["ename"] == "SandboxMemoryLimit"
    assert "1024 MB memory limit" in result.error["evalue"]
    assert not remote.session.dead
    assert remote.execute("print('fresh', 'orders' in globals())").stdout == "fresh False\n"
    assert remote.session.provisioner.handle.id != before
