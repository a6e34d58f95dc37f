"""The ``kubernetes`` sandbox backend against a fake API server and a test kubelet that runs pods under runsc.

The gate talks TCP + CurveZMQ across a real network boundary (the pod's own network namespace, a veth pair,
the pod's NetworkPolicy enforced on the node's end) to a gVisor kernel it did not start itself (tests/kube).
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import nbformat
import pytest
import yaml
import zmq
from conftest import CELLGATE, NORTHWIND, ROOT, SAMPLE_TOOLS, cellgate, serve_on_a_free_port
from jupyter_client import BlockingKernelClient
from kube import network
from kube.cluster import NAMESPACE, FakeCluster, fake_cluster
from mcp import Client

from cellgate.extensions.kubernetes import backend as kubernetes_backend
from cellgate.extensions.kubernetes import manifests
from cellgate.extensions.kubernetes.backend import KubernetesBackend, KubernetesHandle
from cellgate.gate import SandboxError, SandboxUnavailable, load_settings
from cellgate.gate.ext import SandboxRequest
from cellgate.gate.sandbox import oci
from cellgate.gate.sandbox.container import SandboxConfig
from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.root_only  # network namespaces, veth pairs and nftables

TOOLS = {"tools/__init__.py": "def hello():\n    return 42\n"}


@pytest.fixture(scope="module")
def cluster(runsc: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    with fake_cluster(runsc, tmp_path_factory.mktemp("kube")) as found:
        yield found


def backend_for(cluster: FakeCluster, folder: Path, **kubernetes: Any) -> KubernetesBackend:
    (folder / "cellgate.toml").write_text(cluster.toml(**kubernetes))
    return KubernetesBackend(load_settings(folder / "cellgate.toml"))


def request(memory_mb: int = 512, start_timeout: float = 60.0) -> SandboxRequest:
    config = SandboxConfig(isolation="gvisor", runsc=None, limits=oci.Limits(memory_bytes=memory_mb << 20),
                           reply_wait=60.0, start_timeout=start_timeout)
    return SandboxRequest(config=config, tools_files=TOOLS, key=os.urandom(32).hex(), session_id="test")


@pytest.fixture(scope="module")
def backend(cluster: FakeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubernetesBackend]:
    found = backend_for(cluster, tmp_path_factory.mktemp("gate"))
    yield found
    found.close()


@pytest.fixture(scope="module")
def kernel(backend: KubernetesBackend) -> Iterator[KubernetesHandle]:
    handle = backend.start(request())
    yield handle
    backend.delete(handle)


def connect(cluster: FakeCluster, backend: KubernetesBackend, handle: KubernetesHandle) -> BlockingKernelClient:
    """A Jupyter client on the pod's channels. jupyter_client's own client connects with the kernel's key pair,
    which only the Secret holds (the gate connects with a key pair of its own)."""
    info = backend.connection_info(handle)
    secret = cluster.api.store.get("secrets", NAMESPACE, handle.session.secret_name)
    assert secret is not None
    keys = json.loads(base64.b64decode(secret["data"][manifests.CONNECTION_KEY]))
    assert keys["curve_publickey"] == info["curve_publickey"] and "curve_secretkey" not in info
    client = BlockingKernelClient()
    client.load_connection_info({**info, "curve_secretkey": keys["curve_secretkey"]})
    client.start_channels()
    client.wait_for_ready(timeout=60)
    return client


def run(client: BlockingKernelClient, code: str) -> tuple[dict[str, Any], str]:
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
    reply = client.execute_interactive(code, timeout=60, output_hook=hook)
    return reply["content"], "".join(out)


def test_a_cell_runs_in_the_gvisor_pod_over_tcp_and_curve(cluster: FakeCluster, backend: KubernetesBackend,
                                                          kernel: KubernetesHandle) -> None:
    (pod,) = cluster.objects("pods")
    # What the backend created (manifests' objects, its annotation and readiness probe added) is valid Kubernetes.
    for kind in ("pods", "secrets", "configmaps", "networkpolicies"):
        for created in cluster.objects(kind):
            kubernetes_validate.validate({k: v for k, v in created.items() if k != "status"}, "1.35.0", strict=True)
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert spec["runtimeClassName"] == "gvisor" and spec["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    info = backend.connection_info(kernel)
    assert info["transport"] == "tcp" and info["ip"] == pod["status"]["podIP"] == kernel.pod_ip
    assert backend.status(kernel).state == "running"
    client = connect(cluster, backend, kernel)
    try:
        reply, out = run(client, "import os, tools\nprint(tools.hello(), os.getuid())\n"
                                 "open('/workspace/w', 'w').write('ok')\ntry:\n"
                                 "    open('/opt/cellgate/tools/x', 'w')\nexcept OSError as e:\n    print(e.errno)")
    finally:
        client.stop_channels()
    assert reply["status"] == "ok", reply
    # The tools ConfigMap cannot be written: root's and read-only (EACCES before EROFS, as in a cluster).
    assert out in ("42 1000\n13\n", "42 1000\n30\n"), out


def test_the_pod_reaches_neither_the_gate_nor_the_internet(cluster: FakeCluster, backend: KubernetesBackend,
                                                           kernel: KubernetesHandle) -> None:
    node_ip = cluster.kubelet.network_of(kernel.session.pod_name).node_ip
    with socket.create_server(("0.0.0.0", 0)) as listener:  # something on the gate's host to reach, were it allowed
        port = listener.getsockname()[1]
        code = textwrap.dedent(f"""
            import socket
            for address in [({node_ip!r}, {port}), ('1.1.1.1', 80)]:
                try:
                    socket.create_connection(address, timeout=5).close()
                    print(address[0], 'connected')
                except OSError as e:
                    print(address[0], 'refused', type(e).__name__)
        """)
        client = connect(cluster, backend, kernel)
        try:
            reply, out = run(client, code)
        finally:
            client.stop_channels()
    assert reply["status"] == "ok", reply
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines] == [[node_ip, "refused"], ["1.1.1.1", "refused"]], out


def zmtp_greeting(address: tuple[str, int]) -> bytes:
    """The kernel's ZMTP 3 greeting (64 bytes: signature, version, mechanism, ...), read after sending only our
    signature and major version: what a peer sees before any mechanism is chosen."""
    with socket.create_connection(address, timeout=30) as conn:
        conn.sendall(b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03")
        theirs = b""
        while len(theirs) < 64:
            chunk = conn.recv(64 - len(theirs))
            if not chunk:
                break
            theirs += chunk
    return theirs


def test_every_channel_is_curve_and_plain_zmtp_is_refused(backend: KubernetesBackend,
                                                          kernel: KubernetesHandle) -> None:
    info = backend.connection_info(kernel)
    for channel in ("shell", "iopub", "stdin", "control", "hb"):
        greeting = zmtp_greeting((info["ip"], info[f"{channel}_port"]))
        assert greeting[:1] == b"\xff" and greeting[9:10] == b"\x7f", greeting
        assert greeting[12:32].rstrip(b"\x00") == b"CURVE", (channel, greeting[12:32])
    # A ZMQ client without Curve: the handshake fails, and no message is ever exchanged.
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    monitor = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                        | zmq.EVENT_HANDSHAKE_SUCCEEDED)
    dealer.connect(f"tcp://{info['ip']}:{info['shell_port']}")
    try:
        assert monitor.poll(30_000), "no handshake outcome within 30 s"
        event = zmq.utils.monitor.recv_monitor_message(monitor)["event"]
        assert event in (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL), event
    finally:
        dealer.disable_monitor()
        monitor.close(0)
        dealer.close(0)
        context.term()


def test_interrupt_goes_over_the_control_channel(cluster: FakeCluster, backend: KubernetesBackend,
                                                 kernel: KubernetesHandle) -> None:
    assert backend.interrupt(kernel) is False  # no signal crosses a node: the gate sends interrupt_request
    client = connect(cluster, backend, kernel)
    try:
        msg_id = client.execute("import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.05)")
        while True:  # the cell is running once its first output arrives
            msg = client.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                break
        client.control_channel.send(client.session.msg("interrupt_request", {}))
        reply = client.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:  # a late reply to wait_for_ready's kernel_info
            assert reply["msg_type"] == "kernel_info_reply", reply
            reply = client.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        assert run(client, "print('still here')") [1] == "still here\n"
    finally:
        client.stop_channels()


def test_an_api_server_that_does_not_answer_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as unused:  # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        (tmp_path / "kubeconfig").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": url}}], "users": [{"name": "u", "user": {}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        (tmp_path / "cellgate.toml").write_text(f'[sandbox]\nbackend = "kubernetes"\n\n[kubernetes]\n'
                                                f'kubeconfig = "{tmp_path / "kubeconfig"}"\n')
        backend = KubernetesBackend(load_settings(tmp_path / "cellgate.toml"))
        with pytest.raises(SandboxUnavailable, match=f"the Kubernetes API server at {url} did not answer: "
                                                     "ConnectError"):
            backend.start(request())


def test_a_pod_that_never_gets_ready_is_a_clear_error_and_leaves_nothing(
        cluster: FakeCluster, tmp_path: Path) -> None:
    kinds = ("pods", "secrets", "configmaps", "networkpolicies")
    before = {kind: [o["metadata"]["name"] for o in cluster.objects(kind)] for kind in kinds}
    backend = backend_for(cluster, tmp_path, runtime_class="no-such-runtime")
    try:
        with pytest.raises(SandboxError) as caught:
            backend.start(request(start_timeout=1.0))
    finally:
        backend.close()
    message = str(caught.value)
    assert "did not become ready within 1 s" in message
    assert 'FailedCreatePodSandBox: Failed to create pod sandbox: RuntimeHandler "no-such-runtime" not supported' \
        in message
    assert {kind: [o["metadata"]["name"] for o in cluster.objects(kind)] for kind in kinds} == before


def test_a_gone_gate_s_pods_are_reaped_by_label(cluster: FakeCluster, backend: KubernetesBackend,
                                                kernel: KubernetesHandle, tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text(cluster.toml())
    (tmp_path / "long.py").write_text("import time\ntime.sleep(600)\n")
    before = {o["metadata"]["name"] for o in cluster.objects("pods")}
    with subprocess.Popen([*CELLGATE, "exec", str(tmp_path / "long.py")], cwd=tmp_path, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as gate:
        (pod,) = cluster.wait_for_ready_pods(before, 1)  # the gate's kernel pod, running the cell
        os.kill(gate.pid, signal.SIGKILL)  # the gate dies without deleting its pod
    orphan = pod.removeprefix("cellgate-kernel-")
    # What an operator runs (and what the next gate's first session start does through the same reap).
    doctor = cellgate("doctor", "--clean", "--backend", "kubernetes", cwd=tmp_path)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"removed 1 leftover sandbox(es) from the kubernetes backend: {orphan}" in " ".join(doctor.stdout.split())
    for kind in ("pods", "secrets", "configmaps", "networkpolicies"):
        labels = [o["metadata"]["labels"].get(manifests.SESSION_LABEL) for o in cluster.objects(kind)]
        assert orphan not in labels and kernel.id in labels, (kind, labels)  # a live gate's pod stays
    assert backend.status(kernel).state == "running"


def test_northwind_with_the_kubernetes_backend(cluster: FakeCluster, tmp_path: Path) -> None:
    config = (NORTHWIND / "cellgate.toml").read_text().replace('modules = ["tools.py"]',
                                                              f'modules = ["{NORTHWIND / "tools.py"}"]')
    (tmp_path / "cellgate.toml").write_text(config + "\n" + cluster.toml())
    out = tmp_path / "out.ipynb"
    done = cellgate("exec", str(NORTHWIND / "late_orders.py"), "--notebook", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "10000 312\n"
    nb = nbformat.read(out, as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code"]
    assert len(cell.metadata.cellgate.calls) == 313
    sandbox = nb.metadata.cellgate.sandbox
    assert sandbox["backend"] == "kubernetes" and sandbox["runtime_class"] == "gvisor"
    assert sandbox["network"].startswith("pod network: no egress")


def test_the_gate_interrupts_over_control_and_restarts_a_kernel_oom_killed(cluster: FakeCluster,
                                                                          tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text(cluster.toml())
    others = {o["metadata"]["name"] for o in cluster.objects("pods")}  # the module's kernel, if started
    box = BlockingSession(config=tmp_path / "cellgate.toml", tools=[SAMPLE_TOOLS], notebook=tmp_path / "run.ipynb",
                          cwd=tmp_path, memory_mb=256, cell_timeout=3.0, interrupt_grace=30.0).start()
    try:
        assert box.execute("survivor = 7\nprint(tools.echo('gated'))").stdout == "gated\n"
        looped = box.execute("while True:\n    pass")
        assert looped.status == "timeout" and looped.error["ename"] == "KeyboardInterrupt"
        assert box.execute("print(survivor)").stdout == "7\n"  # interrupted, not killed: the same pod
        first_pod = {o["metadata"]["name"] for o in cluster.objects("pods")} - others
        hog = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
        result = box.execute(hog)
        assert result.status == "memory" and result.limits_hit == ["memory"], result
        assert box.execute("print('fresh', 'survivor' in globals())").stdout == "fresh False\n"
        assert len(first_pod) == 1 and not first_pod & {o["metadata"]["name"] for o in cluster.objects("pods")}
    finally:
        box.close()
    cells = nbformat.read(tmp_path / "run.ipynb", as_version=4)["cells"]
    note = next(c for c in cells if c["metadata"].get("cellgate", {}).get("kind") == "kernel-restarted")
    assert note["source"] == ("**The kernel was restarted after the sandbox reached its memory limit.** "
                              "These variables are gone: `survivor`.")


def test_a_pods_link_never_takes_a_subnet_the_host_already_has() -> None:
    """Every fake cluster on the machine (each xdist worker's, other runs') makes its pods' links in one range."""
    with network._links_locked():
        taken = network._free_link()  # the /30 the next pod would get
    other = f"cgkt{secrets.token_hex(3)}"  # another worker's pod link, say, made just now
    network.run("ip", "link", "add", other, "type", "veth", "peer", "name", other + "q")
    try:
        network.run("ip", "addr", "add", f"{next(taken.hosts())}/30", "dev", other)
        pod = network.PodNetwork.create()
        try:
            assert not {ipaddress.ip_address(pod.node_ip), ipaddress.ip_address(pod.pod_ip)} & set(taken), pod
        finally:
            pod.delete()
    finally:
        subprocess.run(["ip", "link", "del", other], capture_output=True, timeout=30)


def assert_deleted_before_exit(cluster: FakeCluster, kept: set[tuple[str, str]]) -> None:
    """Every kernel object but ``kept`` is gone or being deleted (a pod its node is still stopping: it has a
    deletionTimestamp) now, just after the server exited; then wait, on the cluster's changes, until it is gone."""
    left = cluster.owned_names() - kept
    undeleted = [(plural, name) for plural, name in sorted(left)
                 if "deletionTimestamp" not in (cluster.api.store.get(plural, NAMESPACE, name) or {
                     "metadata": {"deletionTimestamp": "gone since"}})["metadata"]]
    assert not undeleted, f"objects the server left behind, never deleted: {undeleted}"
    cluster.wait_until(lambda: not cluster.owned_names() - kept, 60, f"the pods still stopping: {sorted(left)}")


def test_mcp_serve_over_stdio_deletes_its_pods_on_sigterm_before_it_exits(cluster: FakeCluster,
                                                                        tmp_path: Path) -> None:
    """A client (Claude Code, an IDE) stops its stdio server with SIGTERM, stdin still open: the warm pod goes."""
    (tmp_path / "cellgate.toml").write_text(f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n'
                                            f'[audit]\ndir = "{tmp_path / "runs"}"\n\n' + cluster.toml(pool=1))
    before = {o["metadata"]["name"] for o in cluster.objects("pods")}
    kept = cluster.owned_names()
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([*CELLGATE, "mcp", "serve", "--config", str(tmp_path / "cellgate.toml")],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, cwd=tmp_path)
        try:
            cluster.wait_for_ready_pods(before, 1)  # the pool's pod, started before any client
            process.send_signal(signal.SIGTERM)
            assert process.wait(120) == -signal.SIGTERM, log_path.read_text()[-2000:]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
            assert process.stdin is not None
            process.stdin.close()
    assert_deleted_before_exit(cluster, kept)


# The suite runs 4 at once (its time budget); the 16: CELLGATE_TEST_K8S_SESSIONS=16 (50-80 s on 2 cores).
CONCURRENT = int(os.environ.get("CELLGATE_TEST_K8S_SESSIONS", "4"))
WARM = 2  # [sandbox] pool: pods started ahead


def test_concurrent_sessions_through_mcp_serve_each_get_their_own_pod_warm_ones_first(cluster: FakeCluster,
                                                                                      tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text(
        f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[policy.tools.echo]\ndecision = "allow"\n\n'
        f'[audit]\ndir = "{tmp_path / "runs"}"\n\n' + cluster.toml(pool=WARM))
    log_path = tmp_path / "serve.log"
    before = {o["metadata"]["name"] for o in cluster.objects("pods")}
    kept = cluster.owned_names()  # other tests' objects, if any are left: not this server's
    started_after_sigterm: list[str] = []
    stopping = False

    def heard(plural: str, kind: str, obj: dict[str, Any]) -> None:
        if stopping and plural == "pods" and kind == "ADDED":
            started_after_sigterm.append(obj["metadata"]["name"])

    def start(port: int) -> subprocess.Popen[str]:
        return subprocess.Popen([*CELLGATE, "mcp", "serve", "--config", str(tmp_path / "cellgate.toml"),
                                 "--transport", "http", "--port", str(port), "--max-sessions", str(CONCURRENT),
                                 "--allow-local-users"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, text=True)

    async def client_run(url: str, secret: str) -> tuple[str, str, str]:
        async with Client(url) as client:
            code = f"secret = {secret!r}\nprint(tools.echo(secret))\nimport socket\nprint(socket.gethostname())"
            result = await client.call_tool("execute_python", {"code": code})
            text = "".join(block.text for block in result.content if block.type == "text")
            handle = result.structured_content["session"]
            again = await client.call_tool("execute_python", {"code": "print(secret)", "session": handle})
            return text, "".join(block.text for block in again.content if block.type == "text"), handle

    with log_path.open("w") as log:
        port, process = serve_on_a_free_port(start, log_path, "cellgate mcp serve --transport http")
        try:
            warm = cluster.wait_for_ready_pods(before, WARM)  # started ahead, before any client
            url = f"http://127.0.0.1:{port}/mcp"
            secrets_ = [f"tenant-{i}" for i in range(CONCURRENT)]

            async def scenario() -> list[tuple[str, str, str]]:
                return list(await asyncio.gather(*(client_run(url, secret) for secret in secrets_)))
            runs = asyncio.run(asyncio.wait_for(scenario(), 300))
            during = {o["metadata"]["name"] for o in cluster.objects("pods")} - before
        finally:
            cluster.api.store.listeners.append(heard)
            stopping = True
            process.terminate()
            assert process.wait(120) in (0, -15), log_path.read_text()[-2000:]  # -15: uvicorn re-raises SIGTERM
            cluster.api.store.listeners.remove(heard)
    # On SIGTERM the server starts no kernel (the pool refills no more) and deletes each of its kernels' objects
    # before it exits: a pod it leaves is a cost nobody sees. The node may still be stopping a pod (deleted, not
    # yet gone) when the server exits; the rest is gone by then.
    assert not started_after_sigterm, f"pods started after SIGTERM: {started_after_sigterm}"
    assert_deleted_before_exit(cluster, kept)
    hosts = set()
    for secret, (first, again, _) in zip(secrets_, runs, strict=True):
        echoed, host = first.splitlines()[:2]
        assert echoed == secret and again == secret + "\n", (first, again)
        hosts.add(host)
    assert len({handle for _, _, handle in runs}) == CONCURRENT
    assert len(hosts) == CONCURRENT and len(during) >= CONCURRENT  # one pod (its own hostname) per session
    assert warm <= hosts  # the warm pool's pods went to sessions, each to one


VERBS = {("POST", False): "create", ("DELETE", True): "delete", ("GET", True): "get", ("GET", False): "list",
         ("PUT", True): "update", ("PATCH", True): "patch", ("DELETE", False): "deletecollection"}


def asked(path: str, method: str) -> tuple[str, str, str]:
    """(namespace, resource, RBAC verb) of one request (a watch is a collection GET: counted as list)."""
    parts = path.strip("/").split("/")
    at = parts.index("namespaces")
    namespace, rest = parts[at + 1], parts[at + 2:]
    resource = "/".join([rest[0], *rest[2:]])  # pods, or pods/status
    return namespace, resource, VERBS[(method, len(rest) > 1)]


def test_the_backend_asks_only_what_the_deployed_role_grants_and_never_reads_a_secret(
        cluster: FakeCluster, backend: KubernetesBackend, kernel: KubernetesHandle,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything this module's backends asked the API server for (a session of a gate pod that is gone, then its
    reap, at least), checked against deploy/kubernetes/role.yaml: the kernels' Role where the kernels are, the
    gate's own namespace's for the gate pod it looks up. An orphan's Secret is deleted by name, never listed."""
    gone = {"name": "cellgate-gate-5f7d9-gone", "uid": "0f0f0f0f-0000-4000-8000-00000000dead",
            "namespace": "cellgate-gate-ns"}
    monkeypatch.setattr(kubernetes_backend, "gate_owner", lambda: {"host": "another-node", "pid": 1, "start": "1",
                                                                   "pod": gone})
    orphan = backend.start(request())
    monkeypatch.undo()
    assert cluster.api.store.get("secrets", NAMESPACE, orphan.session.secret_name) is not None
    reaped = backend.reap()
    roles = {o["metadata"]["namespace"]: o for o in yaml.safe_load_all((ROOT / "deploy" / "kubernetes" /
                                                                          "role.yaml").read_text())}
    granted: dict[tuple[str, str], set[str]] = {}
    for namespace, role in roles.items():
        where = NAMESPACE if namespace == "cellgate-kernels" else gone["namespace"]  # the fake's names for them
        for rule in role["rules"]:
            for resource in rule["resources"]:
                granted.setdefault((where, resource), set()).update(rule["verbs"])
    requests = [asked(path, method) for method, path in cluster.api.requests]
    beyond = sorted({r for r in requests if r[2] not in granted.get(r[:2], set())})
    assert not beyond, f"the backend asked for what deploy/kubernetes/role.yaml does not grant: {beyond}"
    assert (gone["namespace"], "pods", "get") in requests  # the gate pod looked up, in its own namespace
    assert {verb for _, resource, verb in requests if resource == "secrets"} == {"create", "delete"}
    assert reaped == [orphan.id]
    for kind in ("pods", "secrets", "configmaps", "networkpolicies"):
        labels = [o["metadata"]["labels"].get(manifests.SESSION_LABEL) for o in cluster.objects(kind)]
        assert orphan.id not in labels and kernel.id in labels, (kind, labels)  # a live gate's objects stay
