"""The ``kubernetes`` sandbox backend: each kernel a gVisor pod, the gate connecting over TCP with CurveZMQ.

Per kernel (each launch of a session's kernel, restarts included) it creates the four objects of
``manifests.session_objects`` (NetworkPolicy, connection Secret, tools ConfigMap, Pod), waits on a watch for the
pod to be Ready, and gives the gate the pod's IP, the fixed ports, the HMAC key and the kernel's Curve public key.
The kernel's Curve secret key exists only in the Secret; the gate connects as a Curve client with a key pair of
its own. Interrupts go as ``interrupt_request`` on the control channel (no signal crosses a node); kill deletes
the pod; a container ``OOMKilled`` is status ``memory``; a pod that does not get ready is a ``SandboxError``
naming the reasons from its events and conditions, after its objects are deleted.

Every object carries ``app.kubernetes.io/managed-by: cellgate`` and an annotation naming the gate process that
made it (host, pid, start time; in a cluster also the gate's pod: ``CELLGATE_POD_NAME``/``CELLGATE_POD_UID``/
``CELLGATE_POD_NAMESPACE``, from the downward API). ``reap`` deletes the objects whose gate is gone: a process of
this host that ended, or a gate pod the cluster no longer has (that pod's uid not found by name). When the gate's
pod is in the kernels' namespace it is also each object's owner, so the garbage collector deletes them with it;
Kubernetes has no owner across namespaces (the collector would delete such objects at once), so a gate in a
namespace of its own leaves that to ``reap``.

The backend never reads a Secret: it creates the connection Secret and deletes it by name (the gate's Role grants
``create`` and ``delete`` on Secrets, not ``get``, ``list`` or ``watch``); ``reap`` finds a session's Secret
through the session's other objects (the NetworkPolicy is created before the Secret and deleted after it).

The client is lightkube's async one, on a loop of the backend's own (the seam's methods block and are called
from the gate's threads). Nothing read from the cluster is trusted beyond its shape: reasons are bounded.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import os
import secrets
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import httpx2
import zmq
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import ConfigMap, Event, Pod, Secret
from lightkube.resources.networking_v1 import NetworkPolicy
from typing_extensions import override

from cellgate.extensions.kubernetes import manifests
from cellgate.extensions.kubernetes.config import KubernetesConfig
from cellgate.gate import SandboxError, SandboxUnavailable
from cellgate.gate.ext import (
    CURVE_SERVER_KEY,
    SandboxBackend,
    SandboxHandle,
    SandboxRequest,
    SandboxStatus,
    sandbox_owner_record,
    sandbox_owner_state,
)

T = TypeVar("T")
OWNER_ANNOTATION = "cellgate.dev/gate"  # JSON: the owner record of the gate process that made the object (+ "pod")
LISTED: tuple[type[Any], ...] = (Pod, ConfigMap, NetworkPolicy)  # what reap lists: never a Secret
READINESS_PROBE: dict[str, Any] = {"tcpSocket": {"port": manifests.PORTS["hb_port"]}, "periodSeconds": 1}
REASON_LIMIT = 600  # characters of the cluster's own words kept in an error or a status
MAX_EVENTS = 20  # a pod's latest events quoted when it never gets ready
NETWORK = "pod network: no egress, ingress to the kernel's ports from the gate only (NetworkPolicy)"
# What binds a kernel pod: the cluster's limits on the pod, under its RuntimeClass's runsc (for the record).
LIMITS_ENFORCED = {
    "memory": {"enforced": "whole sandbox",
               "by": "the pod's memory limit (its cgroup on the node); per process also RLIMIT_AS set by the kernel "
                     "before any cell (MemoryError in the cell)"},
    "pids": {"enforced": "no", "by": "the node's podPidsLimit if its kubelet sets one (not set per pod)"},
    "cpu": {"enforced": "whole sandbox", "by": "the pod's CPU limit ([sandbox] cpus, else [kubernetes] cpus: a CFS quota on the node)"},
}
DELETE_WAIT = 30.0  # seconds ``delete`` waits for a pod's node to stop it


def gate_pod() -> dict[str, str] | None:
    """The gate's own pod (the downward API's environment), or None outside a cluster."""
    found = {key: os.environ.get(f"CELLGATE_POD_{key.upper()}", "") for key in ("name", "uid", "namespace")}
    return found if all(found.values()) else None


def gate_owner() -> dict[str, Any]:
    owner = sandbox_owner_record()  # host, pid, start time: the core's one owner record (``liveness``)
    pod = gate_pod()
    if pod is not None:
        owner["pod"] = pod
    return owner


def owner_gone(owner: dict[str, Any]) -> bool:
    """Whether the gate process an object names is gone (only a process of this host can be told)."""
    return sandbox_owner_state(owner) == "gone"


async def pod_gone(client: AsyncClient, owner: dict[str, Any]) -> bool:
    """Whether the gate pod an object names is gone: no pod of that name, or one with another uid."""
    pod = owner.get("pod")
    if not (isinstance(pod, dict) and all(isinstance(pod.get(key), str) for key in ("name", "uid", "namespace"))):
        return False
    try:
        found = await client.get(Pod, pod["name"], namespace=pod["namespace"])
    except ApiError as exc:
        return exc.status.code == 404  # anything else (e.g. not allowed to look): not ours to judge
    return found.metadata is None or found.metadata.uid != pod["uid"]


class KubernetesHandle(SandboxHandle):
    def __init__(self, session: manifests.KernelSession, curve_public: str, backend: KubernetesBackend,
                 request: SandboxRequest) -> None:
        super().__init__(session.session_id, backend, request)
        self.session = session
        self.curve_public = curve_public
        self.pod_ip: str | None = None
        self.node: str | None = None
        self.deleted = False


class KubernetesBackend(SandboxBackend):
    """One gVisor pod per kernel, in ``[kubernetes] namespace``."""

    name = "kubernetes"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.config = settings.section("kubernetes", KubernetesConfig)
        self._kubeconfig = self._load_kubeconfig()
        found = self._kubeconfig.get()
        self._server = found.cluster.server if found is not None else "(none in the kubeconfig)"

    def _load_kubeconfig(self) -> KubeConfig:
        try:
            return (KubeConfig.from_file(self.config.kubeconfig) if self.config.kubeconfig
                    else KubeConfig.from_env())
        except Exception as exc:  # lightkube's own ConfigError, a file that is not a kubeconfig
            raise SandboxUnavailable(f"no Kubernetes cluster to start kernel pods in: {str(exc)[:300]}; set "
                                     "[kubernetes] kubeconfig, $KUBECONFIG, or run the gate in the cluster") from None

    def _run(self, work: Callable[[AsyncClient], Coroutine[Any, Any, T]]) -> T:
        """Run ``work`` with a client of its own on a loop of its own (the seam's methods block, and are called
        from any thread: ``wait`` in one while ``status`` or ``kill`` run in another)."""
        async def session() -> T:
            client = AsyncClient(config=self._kubeconfig, namespace=self.config.namespace)
            try:
                return await work(client)
            finally:
                await client.close()
        try:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(session())
            with concurrent.futures.ThreadPoolExecutor(1) as worker:  # called on a loop's own thread
                return worker.submit(asyncio.run, session()).result()
        except httpx2.TransportError as exc:  # no answer at all (an ApiError is an answer: handled where it comes)
            raise SandboxUnavailable(f"the Kubernetes API server at {self._server} did not "
                                     f"answer: {type(exc).__name__}: {str(exc)[:300]}; check [kubernetes] "
                                     "kubeconfig and that the cluster is reachable from the gate") from None

    @staticmethod
    def _handle(handle: SandboxHandle) -> KubernetesHandle:
        if not isinstance(handle, KubernetesHandle):
            raise TypeError(f"the kubernetes backend was handed a {type(handle).__name__}, not a pod it started")
        return handle

    # ------------------------------------------------------------------ start
    def _session(self, request: SandboxRequest) -> manifests.KernelSession:
        box, config = self.settings.sandbox, self.config
        pod = gate_pod()  # an owner only in its own namespace: the collector deletes a dependent of another's
        owner = manifests.Owner(name=pod["name"], uid=pod["uid"]) if pod and pod["namespace"] == config.namespace \
            else None
        return manifests.KernelSession(
            session_id="cg-" + secrets.token_hex(6), namespace=config.namespace, image=request.image or config.image,
            runtime_class=config.runtime_class,
            gate=manifests.GatePeer(pod_labels=config.gate_pod_labels, namespace=config.gate_namespace),
            memory_mb=request.limits.memory_bytes >> 20, cpus=request.limits.cpus or config.cpus, tmp_mb=box.tmp_mb,
            workspace_mb=box.workspace_mb, deadline_seconds=config.deadline_seconds,
            reply_wait=request.reply_wait, restricted=request.restricted, owner=owner,
            labels=dict(request.labels))

    @override
    def start(self, request: SandboxRequest) -> KubernetesHandle:
        public, secret = (key.decode("ascii") for key in zmq.curve_keypair())
        keys = manifests.KernelKeys(key=request.key, curve_publickey=public, curve_secretkey=secret)
        session = self._session(request)
        handle = KubernetesHandle(session, public, self, request)
        objects = manifests.session_objects(session, keys, request.tools_files)
        owner = json.dumps(gate_owner())
        for obj in objects:
            obj["metadata"].setdefault("annotations", {})[OWNER_ANNOTATION] = owner
            if obj["kind"] == "Pod":  # Ready once the kernel bound its last socket (the heartbeat's)
                obj["spec"]["containers"][0]["readinessProbe"] = READINESS_PROBE
        try:
            self._run(lambda client: self._start(client, handle, objects, request.start_timeout))
        except BaseException:
            with contextlib.suppress(Exception):  # what failed is the error to tell, not its cleanup
                self.delete(handle)
            raise
        return handle

    async def _start(self, client: AsyncClient, handle: KubernetesHandle, objects: list[dict[str, Any]],
                     timeout: float) -> None:
        created = None
        for obj in objects:
            try:
                created = await client.create(from_dict(obj))
            except ApiError as exc:
                raise SandboxError(f"the cluster refused the kernel's {obj['kind']} {obj['metadata']['name']} in "
                                   f"namespace {handle.session.namespace}: {exc.status.message!s:.{REASON_LIMIT}} "
                                   f"(HTTP {exc.status.code}); check the gate's Role (deploy/kubernetes)") from None
        assert isinstance(created, Pod) and created.metadata is not None
        name = handle.session.pod_name
        try:
            async with asyncio.timeout(timeout):
                async for _, pod in client.watch(Pod, namespace=handle.session.namespace,
                                                       fields={"metadata.name": name},
                                                       resource_version=created.metadata.resourceVersion):
                    if self._ready(pod):
                        assert pod.status is not None
                        handle.pod_ip, handle.node = pod.status.podIP, pod.spec.nodeName if pod.spec else None
                        return
                    ended = self._ended(pod)
                    if ended is not None:
                        raise SandboxError(f"the kernel pod {handle.session.namespace}/{name} ended before it was "
                                           f"ready ({ended.state}): {ended.detail or 'no reason given'}")
        except TimeoutError:
            reasons = await self._reasons(client, handle)
            raise SandboxError(f"the kernel pod {handle.session.namespace}/{name} did not become ready within "
                               f"{timeout:g} s ([sandbox] start_timeout): {reasons}; see `kubectl describe pod "
                               f"{name} -n {handle.session.namespace}`") from None

    @staticmethod
    def _ready(pod: Pod) -> bool:
        status = pod.status
        if status is None or not status.podIP or status.phase != "Running":
            return False
        return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])

    async def _reasons(self, client: AsyncClient, handle: KubernetesHandle) -> str:
        """Why a pod is not ready, in the cluster's words: its events (the latest last), else its conditions."""
        namespace, name = handle.session.namespace, handle.session.pod_name
        said: collections.deque[str] = collections.deque(maxlen=MAX_EVENTS)  # the latest; each bounded below
        try:
            async for event in client.list(Event, namespace=namespace,
                                                 fields={"involvedObject.name": name}):
                said.append(f"{event.reason}: {event.message!s:.{REASON_LIMIT}}")
            pod = await client.get(Pod, name, namespace=namespace)
        except ApiError as exc:
            return f"(its state could not be read: {exc.status.message!s:.{REASON_LIMIT}})"
        status = pod.status
        if not said and status is not None:
            said.append(f"phase {status.phase}")
            said.extend(f"{c.type}={c.status}" + (f" ({c.reason}: {c.message!s:.{REASON_LIMIT}})" if c.reason else "")
                        for c in status.conditions or [])
        text = "; ".join(dict.fromkeys(said)) or "the cluster gave no reason (no event, no condition)"
        return text[-REASON_LIMIT:]

    # ------------------------------------------------------------------ the running kernel
    @override
    def connection_info(self, handle: SandboxHandle) -> dict[str, Any]:
        pod = self._handle(handle)
        if pod.pod_ip is None:
            raise SandboxError(f"the kernel pod {pod.session.pod_name} has no IP: it was not started")
        return {**manifests.PORTS, "transport": "tcp", "ip": pod.pod_ip, "key": pod.key,
                "signature_scheme": "hmac-sha256", "kernel_name": "cellgate", CURVE_SERVER_KEY: pod.curve_public}

    @staticmethod
    def _ended(pod: Pod) -> SandboxStatus | None:
        """How a pod's kernel ended, or None while it has not."""
        status = pod.status
        if status is None:
            return None
        for container in status.containerStatuses or []:
            terminated = container.state.terminated if container.state else None
            if terminated is not None:
                detail = f"{terminated.reason or 'terminated'}: {terminated.message or ''}".strip(": ")
                if terminated.reason == "OOMKilled":
                    return SandboxStatus("memory", terminated.exitCode, detail[:REASON_LIMIT])
                return SandboxStatus("exited", terminated.exitCode, detail[:REASON_LIMIT])
        if status.phase in ("Failed", "Succeeded"):
            return SandboxStatus("exited", None, f"pod {status.phase}: {status.reason or ''} {status.message or ''}"
                                 .strip()[:REASON_LIMIT])
        return None

    @override
    def status(self, handle: SandboxHandle) -> SandboxStatus:
        return self._run(lambda client: self._status(client, self._handle(handle)))

    @staticmethod
    async def _pod(client: AsyncClient, handle: KubernetesHandle) -> Pod | None:
        """The session's pod as the cluster has it now; None once it is gone."""
        try:
            return await client.get(Pod, handle.session.pod_name, namespace=handle.session.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    async def _status(self, client: AsyncClient, handle: KubernetesHandle) -> SandboxStatus:
        pod = await self._pod(client, handle)
        if pod is None:
            return SandboxStatus("gone")
        if pod.metadata is not None and pod.metadata.deletionTimestamp is not None:
            return self._ended(pod) or SandboxStatus("exited", None, "the pod is being deleted")
        return self._ended(pod) or SandboxStatus("running")

    @override
    def wait(self, handle: SandboxHandle) -> SandboxStatus:
        return self._run(lambda client: self._wait(client, self._handle(handle)))

    async def _wait(self, client: AsyncClient, handle: KubernetesHandle) -> SandboxStatus:
        while True:  # a watch the server ends is taken up again from the pod's state
            pod = await self._pod(client, handle)
            if pod is None:
                return SandboxStatus("gone")
            ended = self._ended(pod)
            if ended is not None:
                return ended
            assert pod.metadata is not None
            async for kind, seen in client.watch(Pod, namespace=handle.session.namespace,
                                                       fields={"metadata.name": handle.session.pod_name},
                                                       resource_version=pod.metadata.resourceVersion):
                if kind == "DELETED":
                    return self._ended(seen) or SandboxStatus("gone", None, "the pod was deleted")
                ended = self._ended(seen)
                if ended is not None:
                    return ended

    @override
    def kill(self, handle: SandboxHandle) -> None:
        pod = self._handle(handle)
        self._run(lambda client: self._delete_one(client, Pod, pod.session.pod_name, pod.session.namespace,
                                                  grace=0))

    @override
    def delete(self, handle: SandboxHandle) -> None:
        pod = self._handle(handle)
        if pod.deleted:
            return
        session = pod.session
        names = {Pod: session.pod_name, Secret: session.secret_name, ConfigMap: session.config_map_name,
                 NetworkPolicy: session.network_policy_name}
        objects = [(kind, name, session.namespace) for kind, name in names.items()]
        self._run(lambda client: self._delete_all(client, objects))
        pod.deleted = True

    async def _delete_all(self, client: AsyncClient, objects: Sequence[tuple[type[Any], str, str]]) -> None:
        for kind, name, namespace in objects:
            await self._delete_one(client, kind, name, namespace, grace=0 if kind is Pod else None)
        try:  # a deleted pod lingers while its node stops it: it is released once gone
            async with asyncio.timeout(DELETE_WAIT):
                for kind, name, namespace in objects:
                    if kind is Pod:
                        await self._gone(client, name, namespace)
        except TimeoutError:
            pass  # the cluster finishes it; nothing of the gate's waits on it

    async def _gone(self, client: AsyncClient, name: str, namespace: str) -> None:
        try:
            pod = await client.get(Pod, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return
            raise
        assert pod.metadata is not None
        async for kind, _ in client.watch(Pod, namespace=namespace, fields={"metadata.name": name},
                                                resource_version=pod.metadata.resourceVersion):
            if kind == "DELETED":
                return

    async def _delete_one(self, client: AsyncClient, kind: type[Any], name: str, namespace: str,
                          grace: int | None = None) -> None:
        try:
            await client.delete(kind, name, namespace=namespace, grace_period=grace)
        except ApiError as exc:
            if exc.status.code != 404:  # already gone is what was asked
                raise SandboxError(f"could not delete {kind.__name__} {namespace}/{name}: "
                                   f"{exc.status.message!s:.{REASON_LIMIT}}") from None

    @override
    def reap(self) -> list[str]:
        return self._run(self._reap)

    async def _reap(self, client: AsyncClient) -> list[str]:
        """Delete every object labelled as cellgate's whose gate (a process of this host, or a pod) is gone, and
        the connection Secret of each such session, by name (Secrets are never listed)."""
        namespace = self.config.namespace
        orphans: list[tuple[type[Any], str, str]] = []
        sessions: set[str] = set()
        pods: dict[str, bool] = {}  # gone, by the gate pod's annotation (one lookup per gate pod)
        for kind in LISTED:
            async for obj in client.list(kind, namespace=namespace, labels=dict(manifests.MANAGED_BY)):
                meta = obj.metadata
                try:
                    owner = json.loads((meta.annotations or {}).get(OWNER_ANNOTATION, "{}"))
                except ValueError:
                    continue  # not ours to judge
                if not isinstance(owner, dict):
                    continue
                seen = json.dumps(owner.get("pod"), sort_keys=True)
                if seen not in pods:
                    pods[seen] = await pod_gone(client, owner)
                if owner_gone(owner) or pods[seen]:
                    orphans.append((kind, meta.name, namespace))
                    sessions.add((meta.labels or {}).get(manifests.SESSION_LABEL, meta.name))
        secrets_of = [(Secret, manifests.connection_secret_name(session), namespace) for session in sorted(sessions)
                      if manifests.is_session_id(session)]
        # The policies last: a reap cut short still finds the sessions (and their Secrets) through them.
        last = [o for o in orphans if o[0] is NetworkPolicy]
        await self._delete_all(client, [*(o for o in orphans if o[0] is not NetworkPolicy), *secrets_of, *last])
        return sorted(sessions)

    @override
    def runtime(self) -> dict[str, Any]:
        return {"backend": self.name, "runtime": "gvisor", "runtime_class": self.config.runtime_class,
                "namespace": self.config.namespace, "image": self.config.image, "network": NETWORK,
                "limits_enforced": LIMITS_ENFORCED}

    @override
    def describe(self, handle: SandboxHandle) -> dict[str, Any]:
        pod = self._handle(handle)
        session = pod.session
        return {
            "backend": "kubernetes", "id": pod.id, "runtime": "gvisor", "runtime_class": session.runtime_class,
            "namespace": session.namespace, "pod": session.pod_name, "node": pod.node, "image": session.image,
            "limits": {"memory_bytes": session.memory_mb << 20, "cpus": session.cpus,
                       "tmp_bytes": session.tmp_mb << 20, "workspace_bytes": session.workspace_mb << 20,
                       "deadline_seconds": session.deadline_seconds},
            "network": NETWORK, "limits_enforced": LIMITS_ENFORCED,
            "transport": "tcp+curve",
        }

    def close(self) -> None:
        """Nothing stays open between calls (each has its own client)."""
