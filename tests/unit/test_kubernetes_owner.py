"""Who owns a session's Kubernetes objects: an ownerReference only within one namespace, a gone gate pod told by uid.

Kubernetes has no owner across namespaces: the garbage collector treats such a reference as an owner that is
gone, and deletes the dependent. So with the kernels in a namespace of their own (deploy/kubernetes), the gate's
pod is named in the objects' annotation instead, and ``reap`` asks the cluster whether that pod still exists.
The reap itself, against the fake API server, is tested in tests/sandbox/test_kubernetes_backend.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta, Status
from lightkube.resources.core_v1 import Pod

from cellgate.extensions.kubernetes import backend as kubernetes_backend
from cellgate.extensions.kubernetes.backend import KubernetesBackend, gate_owner, pod_gone
from cellgate.gate import load_settings
from cellgate.gate.ext import SandboxRequest
from cellgate.gate.sandbox import oci
from cellgate.gate.sandbox.container import SandboxConfig

GATE = {"name": "cellgate-gate-5f7d9-abcde", "uid": "4b2d7c1e-0000-4000-8000-000000000001", "namespace": "cellgate"}


def backend(tmp_path: Path, namespace: str) -> KubernetesBackend:
    (tmp_path / "kubeconfig").write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    (tmp_path / "cellgate.toml").write_text(f'[sandbox]\nbackend = "kubernetes"\n\n[kubernetes]\n'
                                            f'kubeconfig = "{tmp_path / "kubeconfig"}"\nnamespace = "{namespace}"\n')
    return KubernetesBackend(load_settings(tmp_path / "cellgate.toml"))


def request() -> SandboxRequest:
    config = SandboxConfig(isolation="gvisor", runsc=None, limits=oci.Limits(), reply_wait=60.0)
    return SandboxRequest(config=config, tools_files={}, key="0" * 64, session_id="test")


@pytest.fixture
def in_the_gate_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in GATE.items():
        monkeypatch.setenv(f"CELLGATE_POD_{key.upper()}", value)


@pytest.mark.usefixtures("in_the_gate_pod")
def test_the_gate_pod_owns_the_objects_only_in_its_own_namespace(tmp_path: Path) -> None:
    same = backend(tmp_path, "cellgate")._session(request())
    assert same.owner is not None and (same.owner.name, same.owner.uid) == (GATE["name"], GATE["uid"])
    apart = backend(tmp_path, "cellgate-kernels")._session(request())
    assert apart.owner is None  # else the garbage collector would delete the kernel's objects at once
    assert gate_owner()["pod"] == GATE  # the annotation names it wherever the objects are


class Cluster:
    """A client's ``get`` of pods: a pod of a uid, or an API error."""

    def __init__(self, uid: str | None = None, code: int | None = None) -> None:
        self.uid, self.code, self.asked = uid, code, []

    async def get(self, kind: type[Any], name: str, namespace: str) -> Pod:
        self.asked.append((kind, name, namespace))
        if self.code is not None:
            raise ApiError(status=Status(code=self.code, message="said the cluster"))
        return Pod(metadata=ObjectMeta(name=name, namespace=namespace, uid=self.uid))


@pytest.mark.parametrize(("cluster", "gone"), [
    (Cluster(uid=GATE["uid"]), False),  # the gate pod is still there
    (Cluster(uid="another-uid"), True),  # a new pod of the same name (a StatefulSet's, say): not the one
    (Cluster(code=404), True),
    (Cluster(code=403), False),  # not allowed to look: not ours to judge
])
def test_a_gate_pod_is_gone_when_the_cluster_has_no_pod_of_its_name_and_uid(cluster: Cluster, gone: bool) -> None:
    assert asyncio.run(pod_gone(cluster, {"pod": GATE})) is gone  # type: ignore[arg-type]
    assert cluster.asked == [(Pod, GATE["name"], GATE["namespace"])]


@pytest.mark.parametrize("owner", [{}, {"pod": "cellgate-gate"}, {"pod": {"name": "x", "uid": 1, "namespace": "y"}}])
def test_an_annotation_without_a_whole_gate_pod_is_not_judged(owner: dict[str, Any]) -> None:
    cluster = Cluster(code=404)
    assert asyncio.run(pod_gone(cluster, owner)) is False  # type: ignore[arg-type]
    assert cluster.asked == []


def test_outside_a_cluster_the_annotation_names_no_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in GATE:
        monkeypatch.delenv(f"CELLGATE_POD_{key.upper()}", raising=False)
    assert "pod" not in kubernetes_backend.gate_owner()
