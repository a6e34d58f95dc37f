"""deploy/kubernetes/: every object validated against the Kubernetes OpenAPI schemas (kubernetes-validate, strict),
and the files agreeing with each other and with the session objects the gate creates (``manifests``): the gate's
Role reads no Secret and lives where only the kernels are, the gate's NetworkPolicy lets in only the namespaces the
operator labels and out only to the kernels, DNS and the API server's own addresses.

No kustomize binary comes from Debian, PyPI or npm; each file kustomization.yaml lists is validated on its own
(`kubectl kustomize deploy/kubernetes` builds the whole where kubectl is installed; CI has no kustomize).
"""

from __future__ import annotations

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


GATE_NAMESPACE, KERNELS_NAMESPACE = "cellgate", "cellgate-kernels"
CLUSTER_WIDE = {"Namespace", "RuntimeClass"}


def test_the_kustomization_lists_every_file_and_only_files_that_exist() -> None:
    assert KUSTOMIZATION["kind"] == "Kustomization"
    assert sorted(KUSTOMIZATION["resources"]) == FILES
    # Each object names its namespace: a kustomization `namespace:` would move the kernels' objects into the gate's.
    assert "namespace" not in KUSTOMIZATION
    placed = {(o["kind"], o["metadata"]["name"]): o["metadata"].get("namespace") for file in FILES
              for o in objects(file) if o["kind"] not in CLUSTER_WIDE}
    assert set(placed.values()) == {GATE_NAMESPACE, KERNELS_NAMESPACE}, placed
    assert {o["metadata"]["name"] for o in objects("namespace.yaml")} == {GATE_NAMESPACE, KERNELS_NAMESPACE}


def gate_settings() -> dict[str, Any]:
    return tomllib.loads(one("ConfigMap")["data"]["cellgate.toml"])


@pytest.mark.parametrize("name", FILES)
def test_each_file_is_valid_against_the_kubernetes_schemas(name: str) -> None:
    docs = objects(name)
    assert docs, f"{name} holds no object"
    for obj in docs:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_gvisor_default_deny_and_restricted_namespaces() -> None:
    assert one("RuntimeClass")["handler"] == "runsc" and one("RuntimeClass")["metadata"]["name"] == "gvisor"
    denies = [o for o in objects("default-deny.yaml") if o["metadata"]["name"] == "default-deny"]
    assert {o["metadata"]["namespace"] for o in denies} == {GATE_NAMESPACE, KERNELS_NAMESPACE}
    assert all(o["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]} for o in denies)
    for namespace in objects("namespace.yaml"):
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def grants(role: dict[str, Any]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            found.setdefault(resource, set()).update(rule["verbs"])
    return found


def roles() -> dict[str, dict[str, Any]]:
    """The Roles by namespace (one each)."""
    found = [o for o in objects("role.yaml") if o["kind"] == "Role"]
    by_namespace = {o["metadata"]["namespace"]: o for o in found}
    assert len(by_namespace) == len(found)
    return by_namespace


def test_the_role_grants_only_what_the_backend_does_where_the_kernels_are() -> None:
    assert set(roles()) == {GATE_NAMESPACE, KERNELS_NAMESPACE}
    kernels, gate = grants(roles()[KERNELS_NAMESPACE]), grants(roles()[GATE_NAMESPACE])
    assert set(kernels) == {"pods", "pods/status", "secrets", "configmaps", "networkpolicies", "events"}
    assert kernels["pods/status"] == kernels["events"] - {"list", "watch"} == {"get"}
    assert set().union(*kernels.values()) <= {"get", "list", "watch", "create", "delete"}
    # Secrets: made and deleted by name, never read back: no get, list or watch of any Secret, anywhere.
    assert kernels["secrets"] == {"create", "delete"}
    # In the gate's namespace (its tokens, your tools' credentials): reading pods (is a gate pod still there?).
    assert gate == {"pods": {"get"}}
    kinds = {o["kind"] for file in FILES for o in objects(file)}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    bindings = {o["metadata"]["namespace"]: o for o in objects("rolebinding.yaml")}
    assert set(bindings) == set(roles())
    for namespace, binding in bindings.items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": roles()[namespace]["metadata"]["name"]}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "cellgate-gate",
                                        "namespace": GATE_NAMESPACE}]


def test_the_kernels_namespace_holds_no_secret_of_the_gate() -> None:
    """Whoever may create pods in a namespace can mount its every Secret: the gate's are where it creates none."""
    settings = gate_settings()["kubernetes"]
    assert settings["namespace"] == KERNELS_NAMESPACE == roles()[KERNELS_NAMESPACE]["metadata"]["namespace"]
    assert settings["gate_namespace"] == one("Deployment")["metadata"]["namespace"] == GATE_NAMESPACE
    assert not [o for file in FILES for o in objects(file)
                if o["kind"] == "Secret" and o["metadata"].get("namespace") != GATE_NAMESPACE]
    assert [v["name"] for v in one("Deployment")["spec"]["template"]["spec"]["volumes"] if "secret" in v] \
        == ["mcp-tokens"]  # mounted from the gate's own namespace (a pod mounts only its namespace's Secrets)


def peer_is_named(peer: dict[str, Any]) -> bool:
    """A peer that names who: labels of namespaces or pods, never an empty selector (= everything)."""
    selectors = [peer[key] for key in ("namespaceSelector", "podSelector") if key in peer]
    return bool(selectors) and all(s.get("matchLabels") or s.get("matchExpressions") for s in selectors)


def test_only_the_namespaces_the_operator_labels_reach_the_gate() -> None:
    policy = one("NetworkPolicy", "cellgate-gate")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    for rule in policy["ingress"]:
        assert rule.get("from"), f"an ingress rule without `from` admits every source: {rule}"
        assert all(peer_is_named(peer) for peer in rule["from"]), rule
    (mcp,) = policy["ingress"]
    assert mcp["from"] == [{"namespaceSelector": {"matchLabels": {"cellgate.dev/mcp-clients": "true"}}}]
    assert mcp["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_the_gate_reaches_only_the_kernels_dns_and_the_api_servers_addresses() -> None:
    policy = one("NetworkPolicy", "cellgate-gate")["spec"]
    for rule in policy["egress"]:
        assert rule.get("to"), f"an egress rule without `to` reaches everywhere: {rule}"
        for peer in rule["to"]:
            if "ipBlock" in peer:
                assert peer["ipBlock"]["cidr"].endswith("/32") and "except" not in peer["ipBlock"], peer
            else:
                assert peer_is_named(peer), peer
        assert rule.get("ports"), f"an egress rule without ports reaches every port: {rule}"
    by_port = {port["port"]: rule for rule in policy["egress"] for port in rule["ports"]}
    assert [peer["ipBlock"]["cidr"] for peer in by_port[6443]["to"]] == ["192.0.2.1/32"]  # to be replaced
    assert by_port[443] is by_port[6443]
    assert by_port[53]["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                                  "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]


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
    settings = gate_settings()
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
    settings = gate_settings()["kubernetes"]
    session = manifests.KernelSession(session_id="cg-0123456789ab", namespace=settings["namespace"],
                                      image="cellgate/kernel",
                                      gate=manifests.GatePeer(pod_labels=settings["gate_pod_labels"],
                                                              namespace=settings["gate_namespace"]))
    kernel_labels = manifests.kernel_pod(session, [])["metadata"]["labels"]
    deployment = one("Deployment")
    gate_labels = deployment["spec"]["template"]["metadata"]["labels"]
    # The session's NetworkPolicy admits the gate's pods, in the gate's namespace ...
    (peer,) = manifests.network_policy(session)["spec"]["ingress"][0]["from"]
    assert peer["podSelector"]["matchLabels"].items() <= gate_labels.items()
    assert peer["namespaceSelector"] == {"matchLabels": {
        "kubernetes.io/metadata.name": deployment["metadata"]["namespace"]}}
    # ... and the gate's own policy lets it reach the kernel pods' ports, in the kernels' namespace only.
    policy = one("NetworkPolicy", "cellgate-gate")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= gate_labels.items()
    (to_kernels,) = [rule for rule in policy["egress"] if any(
        peer.get("namespaceSelector", {}).get("matchLabels") == {"kubernetes.io/metadata.name": session.namespace}
        for peer in rule["to"])]
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
