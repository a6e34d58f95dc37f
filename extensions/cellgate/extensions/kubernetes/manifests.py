"""The Kubernetes objects of one session, built by pure functions (no I/O, no client).

A session is four objects, created in this order and deleted together (``session_objects``):

- a **NetworkPolicy** selecting only this session's pod: no egress rule at all (nothing leaves the pod, DNS
  included), ingress only to the kernel's five ports and only from the gate's pods;
- a **Secret** holding the kernel's connection file: the HMAC key, the fixed ports, ``transport: tcp``,
  ``ip: 0.0.0.0`` and the CurveZMQ keypair (``curve_publickey``/``curve_secretkey``, the names jupyter_client
  8.10 and ipykernel 7.4 read: one keypair, the kernel's sockets are Curve servers with it);
- a **ConfigMap** holding the generated ``tools`` package;
- the kernel **Pod**: ``runtimeClassName`` gvisor, a non-root user, read-only root filesystem, no capability,
  ``seccompProfile: RuntimeDefault``, no service-account token, no service links, memory and CPU limits,
  ``activeDeadlineSeconds``; the Secret and ConfigMap mounted read-only where the local sandbox mounts them
  (``cellgate.gate.sandbox.oci``), /tmp and /workspace size-limited memory-backed emptyDirs.

Like ``oci.spec`` for the local sandbox, this file is the security boundary's configuration: golden tests pin
it and every object is validated against the Kubernetes OpenAPI schemas (``kubernetes-validate``).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pydantic import Field, field_validator, model_validator

from cellgate.gate.ext import SandboxLimits, StrictModel, sandbox_kernel_environment

MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "cellgate"}
SESSION_LABEL: Final = "cellgate.dev/session"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"

# The kernel's fixed ports in its pod (one pod per session, so fixed ports never collide).
PORTS: Final = {"shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003, "control_port": 5004, "hb_port": 5005}
PORT_NAMES: Final = {"shell_port": "shell", "iopub_port": "iopub", "stdin_port": "stdin",
                     "control_port": "control", "hb_port": "hb"}

# Paths inside the pod: the same as in the local sandbox (``cellgate.gate.sandbox.oci``).
CONNECTION_DIR: Final = "/run/cellgate/conn"
CONNECTION_KEY: Final = "kernel.json"
CONNECTION_FILE: Final = f"{CONNECTION_DIR}/{CONNECTION_KEY}"
TOOLS_DIR: Final = "/opt/cellgate/tools"  # on PYTHONPATH: the kernel's preload imports ``tools`` from here
WORKSPACE: Final = "/workspace"
KERNEL_UID: Final = 1000  # the image's user (deploy/kubernetes/Dockerfile) and the local sandbox's
KERNEL_GID: Final = 1000

# etcd refuses an object over 1.5 MiB; a ConfigMap's or Secret's data must stay under 1 MiB.
MAX_DATA_BYTES: Final = 1 << 20

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_Z85_KEY = re.compile(r"^[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$")


class GatePeer(StrictModel):
    """Who may reach the kernel's ports: the gate's pods (``pod_labels``), in ``namespace`` (None: the session's).

    Give the labels, the namespace or both; with only a namespace, every pod there may connect.
    """

    pod_labels: dict[str, str] = Field(default_factory=dict)
    namespace: str | None = None

    @field_validator("pod_labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return _checked_labels(labels)

    @model_validator(mode="after")
    def _some(self) -> GatePeer:
        if not self.pod_labels and self.namespace is None:
            raise ValueError("give the gate's pod labels or its namespace: an empty selector would let every pod "
                             "of the session's namespace reach the kernel")
        if self.namespace is not None and not _DNS_LABEL.match(self.namespace):
            raise ValueError(f"namespace {self.namespace!r} is not a Kubernetes namespace name (lowercase letters, "
                             "digits and -)")
        return self


class Owner(StrictModel):
    """An ownerReference: the object whose deletion deletes the session's objects (e.g. the gate's pod)."""

    api_version: str = "v1"
    kind: str = "Pod"
    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid,
                "blockOwnerDeletion": False}


class KernelSession(StrictModel):
    """What the objects of one session are made from: the backend fills it from ``[sandbox]`` and its own config."""

    session_id: str = Field(description="a DNS label of at most 40 characters, e.g. the sandbox id cg-0123456789ab")
    namespace: str
    image: str = Field(description="the kernel image (deploy/kubernetes/Dockerfile)")
    runtime_class: str = "gvisor"
    gate: GatePeer
    memory_mb: int = Field(default=1024, ge=128, le=65536)
    cpus: float = Field(default=1.0, gt=0, le=64)
    tmp_mb: int = Field(default=256, ge=1, le=65536)
    workspace_mb: int = Field(default=256, ge=1, le=1 << 20)
    deadline_seconds: int = Field(default=86400, ge=1, description="activeDeadlineSeconds: the pod's whole life")
    reply_wait: float = Field(default=3600.0, gt=0, description="seconds a tool call waits for the gate's reply")
    restricted: tuple[str, ...] | None = Field(default=None, description="restricted mode's extra allowed imports "
                                                                         "(None: restricted mode off)")
    owner: Owner | None = None
    labels: dict[str, str] = Field(default_factory=dict, description="more labels on every object of the session")

    @field_validator("session_id")
    @classmethod
    def _session_id(cls, value: str) -> str:
        if not is_session_id(value):
            raise ValueError(f"session id {value!r} must be a DNS label of at most 40 characters (lowercase "
                             "letters, digits and -): it names the session's pod, Secret, ConfigMap and NetworkPolicy")
        return value

    @field_validator("namespace", "runtime_class")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _DNS_LABEL.match(value):
            raise ValueError(f"{value!r} is not a Kubernetes object name (lowercase letters, digits and -)")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        reserved = {SESSION_LABEL, COMPONENT_LABEL, *MANAGED_BY} & set(labels)
        if reserved:
            raise ValueError(f"labels {sorted(reserved)} are set by cellgate: remove them")
        return _checked_labels(labels)

    @property
    def pod_name(self) -> str:
        return f"cellgate-kernel-{self.session_id}"

    @property
    def secret_name(self) -> str:
        return connection_secret_name(self.session_id)

    @property
    def config_map_name(self) -> str:
        return f"cellgate-tools-{self.session_id}"

    @property
    def network_policy_name(self) -> str:
        return f"cellgate-kernel-{self.session_id}"

    def selector(self) -> dict[str, str]:
        """The labels that pick this session's objects (``kubectl get pods -l``)."""
        return {**MANAGED_BY, SESSION_LABEL: self.session_id}


def is_session_id(value: str) -> bool:
    """A DNS label of at most 40 characters: what names a session's objects."""
    return len(value) <= 40 and bool(_DNS_LABEL.match(value))


def connection_secret_name(session_id: str) -> str:
    """The session's connection Secret, found by this name alone (the gate never lists Secrets)."""
    return f"cellgate-conn-{session_id}"


class KernelKeys(StrictModel):
    """The session's secrets: the HMAC key that signs every message, and the CurveZMQ keypair (Z85, 40 chars)."""

    key: str = Field(min_length=32, repr=False)
    curve_publickey: str
    curve_secretkey: str = Field(repr=False)

    @field_validator("curve_publickey", "curve_secretkey")
    @classmethod
    def _z85(cls, value: str) -> str:
        if not _Z85_KEY.match(value):
            raise ValueError("a CurveZMQ key is 40 Z85 characters, as zmq.curve_keypair() gives it")
        return value


def _checked_labels(labels: Mapping[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if len(key.rpartition("/")[2]) > 63 or not _LABEL_KEY.match(key):
            raise ValueError(f"label key {key!r} is not a Kubernetes label key")
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ValueError(f"label {key}={value!r}: a value is at most 63 letters, digits, -, _ and .")
    return dict(labels)


def _metadata(session: KernelSession, name: str, component: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": session.namespace,
        "labels": {**session.labels, **session.selector(), COMPONENT_LABEL: component},
    }
    if session.owner is not None:
        metadata["ownerReferences"] = [session.owner.reference()]
    return metadata


def connection_file(keys: KernelKeys, ip: str = "0.0.0.0") -> dict[str, Any]:
    """The kernel's connection file (``ip``: where it binds); the gate's client uses it with the pod's IP."""
    return {
        **PORTS,
        "transport": "tcp",
        "ip": ip,
        "key": keys.key,
        "signature_scheme": "hmac-sha256",
        "kernel_name": "cellgate",
        "curve_publickey": keys.curve_publickey,
        "curve_secretkey": keys.curve_secretkey,
    }


def connection_secret(session: KernelSession, keys: KernelKeys) -> dict[str, Any]:
    """The Secret holding the connection file, mounted read-only at ``CONNECTION_DIR`` in the pod."""
    text = json.dumps(connection_file(keys), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(session, session.secret_name, "connection"),
        "type": "Opaque",
        "immutable": True,
        "data": {CONNECTION_KEY: base64.b64encode(text.encode()).decode("ascii")},
    }


def config_map_key(path: str) -> str:
    """A ConfigMap key for a file of the tools package (``tools/crm/__init__.py`` -> ``tools.crm.__init__.py``).

    The package's folders are Python identifiers, which hold no ``.``, so the mapping cannot collide.
    """
    key = path.replace("/", ".")
    if not _CONFIG_KEY.match(key) or ".." in path or path.startswith("/"):
        raise ValueError(f"tools file {path!r} cannot be a ConfigMap key: a relative path of letters, digits, "
                         "_, - and . is needed")
    return key


def tools_config_map(session: KernelSession, files: Mapping[str, str]) -> dict[str, Any]:
    """The ConfigMap holding the generated ``tools`` package (``stubgen.generate``: relative path -> source)."""
    data = {config_map_key(path): text for path, text in sorted(files.items())}
    if len(data) != len(files):
        raise ValueError(f"tools files {sorted(files)} map to the same ConfigMap key twice")
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > MAX_DATA_BYTES:
        raise ValueError(f"the tools package of session {session.session_id} is {size} bytes; a ConfigMap holds "
                         f"at most {MAX_DATA_BYTES} (1 MiB): give the session fewer tools or shorter docstrings")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(session, session.config_map_name, "tools"),
        "immutable": True,
        "data": data,
    }


def kernel_environment(session: KernelSession) -> dict[str, str]:
    """The kernel's whole environment, the one a local sandbox's kernel gets with the same limits, less what only
    a host-backed folder gives (no output log: the gate cannot read a file in the pod; no snapshot: the cluster
    starts pods, runsc's checkpoints are not there)."""
    limits = SandboxLimits(memory_bytes=session.memory_mb << 20)
    env = sandbox_kernel_environment(limits, session.reply_wait, session.restricted, host_files=False)
    return dict(sorted(env.items()))


def kernel_argv() -> list[str]:
    """The kernel's command, as the local sandbox runs it (``Sandbox._prepare``)."""
    return ["python", "-m", "cellgate.kernel", "-f", CONNECTION_FILE,
            "--HistoryManager.hist_file=:memory:",  # history in the kernel's memory: never a file
            "--IPKernelApp.parent_handle=0"]


def _cpu(cpus: float) -> str:
    return f"{max(1, round(cpus * 1000))}m"


def kernel_pod(session: KernelSession, tools: Iterable[str]) -> dict[str, Any]:
    """The session's kernel Pod: gVisor, non-root, read-only, no capability, no token, no egress (its policy).

    ``tools``: the paths of the tools package's files (``tools_config_map``'s), mapped back from their keys.
    """
    items = [{"key": config_map_key(path), "path": path} for path in sorted(tools)]
    tools_volume: dict[str, Any] = {"name": session.config_map_name, "defaultMode": 0o444}
    if items:
        tools_volume["items"] = items
    resources = {"cpu": _cpu(session.cpus), "memory": f"{session.memory_mb}Mi"}
    container = {
        "name": "kernel",
        "image": session.image,
        "imagePullPolicy": "IfNotPresent",
        "command": kernel_argv(),
        "workingDir": WORKSPACE,
        "env": [{"name": name, "value": value} for name, value in kernel_environment(session).items()],
        "ports": [{"name": PORT_NAMES[channel], "containerPort": port, "protocol": "TCP"}
                  for channel, port in PORTS.items()],
        # Requests equal limits: the Guaranteed class, the last a node evicts. The memory-backed emptyDirs
        # below count against the memory limit, as the local sandbox's tmpfs count against its cgroup.
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": {
            "runAsUser": KERNEL_UID,
            "runAsGroup": KERNEL_GID,
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "connection", "mountPath": CONNECTION_DIR, "readOnly": True},
            {"name": "tools", "mountPath": TOOLS_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "workspace", "mountPath": WORKSPACE},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(session, session.pod_name, "kernel"),
        "spec": {
            "runtimeClassName": session.runtime_class,
            "restartPolicy": "Never",  # the gate restarts a kernel itself, in a new pod
            "activeDeadlineSeconds": session.deadline_seconds,
            "terminationGracePeriodSeconds": 2,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsUser": KERNEL_UID,
                "runAsGroup": KERNEL_GID,
                "runAsNonRoot": True,
                "fsGroup": KERNEL_GID,  # the Secret's file is root:fsGroup 0440, readable by the kernel only
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [
                {"name": "connection", "secret": {"secretName": session.secret_name, "defaultMode": 0o440}},
                {"name": "tools", "configMap": tools_volume},
                {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": f"{session.tmp_mb}Mi"}},
                {"name": "workspace", "emptyDir": {"medium": "Memory", "sizeLimit": f"{session.workspace_mb}Mi"}},
            ],
        },
    }


def network_policy(session: KernelSession) -> dict[str, Any]:
    """No egress at all; ingress to the kernel's ports only from the gate (its pods, its namespace or both)."""
    peer: dict[str, Any] = {}
    if session.gate.pod_labels:
        peer["podSelector"] = {"matchLabels": dict(session.gate.pod_labels)}
    if session.gate.namespace is not None:
        peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": session.gate.namespace}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(session, session.network_policy_name, "kernel"),
        "spec": {
            "podSelector": {"matchLabels": session.selector()},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [peer], "ports": [{"protocol": "TCP", "port": port} for port in PORTS.values()]}],
            "egress": [],  # none: the pod reaches nothing, not even the cluster's DNS
        },
    }


def session_objects(session: KernelSession, keys: KernelKeys, tools: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every object of a session, in the order to create them: the policy before the pod it confines."""
    return [network_policy(session), connection_secret(session, keys), tools_config_map(session, tools),
            kernel_pod(session, tools)]
