"""deploy/kubernetes/: every object validated against the Kubernetes OpenAPI schemas (kubernetes-validate, strict),
and the files agreeing with each other and with the session objects the gate creates (``manifests``).

No kustomize binary comes from Debian, PyPI or npm; each file kustomization.yaml lists is validated on its own.
Where ``kubectl`` is installed, its built-in kustomize builds the whole and that is validated too.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from conftest import ROOT

from cellgate.extensions.kubernetes import manifests
from cellgate.extensions.mcp.config import McpConfig

DEPLOY = ROOT / "deploy" / "kubernetes"
KUBERNETES = "1.35.0"
KUSTOMIZATION = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
FILES = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def objects(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc is not None]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of ``kind`` (and ``name``) in the deploy files."""
    (found,) = [o for file in FILES for o in objects(file)
                if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def test_the_kustomization_lists_every_file_and_only_files_that_exist() -> None:
    assert KUSTOMIZATION["kind"] == "Kustomization" and KUSTOMIZATION["namespace"] == "cellgate"
    assert sorted(KUSTOMIZATION["resources"]) == FILES


@pytest.mark.parametrize("name", FILES)
def test_each_file_is_valid_against_the_kubernetes_schemas(name: str) -> None:
    docs = objects(name)
    assert docs, f"{name} holds no object"
    for obj in docs:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_the_kustomize_build_is_valid_where_kubectl_can_build_it() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl (kustomize) on this machine: each file was validated on its own")
    built = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d is not None]
    assert len(docs) == sum(len(objects(name)) for name in FILES)
    for obj in docs:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        if obj["kind"] not in ("Namespace", "RuntimeClass"):
            assert obj["metadata"]["namespace"] == "cellgate", obj["metadata"]


def test_gvisor_default_deny_and_a_restricted_namespace() -> None:
    assert one("RuntimeClass")["handler"] == "runsc" and one("RuntimeClass")["metadata"]["name"] == "gvisor"
    deny = one("NetworkPolicy", "default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    namespace = one("Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_role_grants_only_what_the_backend_does_in_its_namespace() -> None:
    role = one("Role")
    granted = {resource: set(rule["verbs"]) for rule in role["rules"] for resource in rule["resources"]}
    assert set(granted) == {"pods", "pods/status", "secrets", "configmaps", "networkpolicies", "events"}
    assert granted["pods/status"] == granted["events"] - {"list", "watch"} == {"get"}
    everything = set().union(*granted.values())
    assert everything <= {"get", "list", "watch", "create", "delete"}
    kinds = {o["kind"] for file in FILES for o in objects(file)}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    binding = one("RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "cellgate-gate", "namespace": "cellgate"}]


def test_the_gate_serves_mcp_over_http_with_the_kubernetes_backend_and_journals_on_the_volume() -> None:
    deployment = one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (gate,) = pod["containers"]
    assert gate["command"][:5] == ["cellgate", "mcp", "serve", "--transport", "http"]
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True and gate["securityContext"]["readOnlyRootFilesystem"]
    mounts = {m["mountPath"]: m["name"] for m in gate["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_path = gate["command"][gate["command"].index("--config") + 1]
    assert mounts[str(Path(config_path).parent)] == "config"
    config_map = one("ConfigMap")
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    settings = tomllib.loads(config_map["data"][Path(config_path).name])
    assert settings["sandbox"]["backend"] == "kubernetes"
    # Not on 127.0.0.1, so [mcp.auth] is required (mcp serve refuses otherwise); its tokens from a mounted Secret.
    auth = McpConfig.model_validate(settings["mcp"]).auth
    assert auth is not None and auth.tokens_file is not None
    assert mounts[str(Path(auth.tokens_file).parent)] == "mcp-tokens" and "secret" in volumes["mcp-tokens"]
    # Journals and the host key that signs them outlive the pod.
    journals = next(path for path, name in mounts.items() if name == "journals")
    assert volumes["journals"]["persistentVolumeClaim"]["claimName"] == one("PersistentVolumeClaim")["metadata"]["name"]
    env = {e["name"]: e.get("value") for e in gate["env"]}
    assert settings["audit"]["dir"].startswith(journals + "/") and env["XDG_DATA_HOME"].startswith(journals + "/")


def test_the_gates_policy_reaches_exactly_the_kernel_pods_the_gate_creates() -> None:
    session = manifests.KernelSession(session_id="cg-0123456789ab", namespace="cellgate", image="cellgate/kernel",
                                      gate=manifests.GatePeer(pod_labels={"app.kubernetes.io/name": "cellgate-gate"}))
    kernel_labels = manifests.kernel_pod(session, [])["metadata"]["labels"]
    gate_labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    # The session's NetworkPolicy admits the gate's pods ...
    assert session.gate.pod_labels.items() <= gate_labels.items()
    # ... and the gate's own policy lets it reach the kernel pods' ports, and those only among pods.
    policy = one("NetworkPolicy", "cellgate-gate")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= gate_labels.items()
    (to_kernels,) = [rule for rule in policy["egress"] if any("podSelector" in peer and "namespaceSelector" not in peer
                                                              for peer in rule.get("to", []))]
    assert to_kernels["to"][0]["podSelector"]["matchLabels"].items() <= kernel_labels.items()
    (ports,) = to_kernels["ports"]
    assert (ports["port"], ports["endPort"]) == (min(manifests.PORTS.values()), max(manifests.PORTS.values()))
    assert sorted(manifests.PORTS.values()) == list(range(ports["port"], ports["endPort"] + 1))


def test_the_kernel_image_holds_the_kernel_slice_only_and_runs_as_the_sandbox_user() -> None:
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]
    copied = [line.split()[1] for line in lines if line.startswith("COPY")]
    assert copied and all(source.startswith("kernel/") for source in copied)
    assert f"USER {manifests.KERNEL_UID}:{manifests.KERNEL_GID}" in lines
    assert any("pip install /src/kernel" in line for line in lines)
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*") + 1:ignore.index("*") + 3] == ["!kernel/pyproject.toml",
                                                                   "!kernel/cellgate/kernel/**"]
