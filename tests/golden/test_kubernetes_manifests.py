"""The Kubernetes objects of one session (``cellgate.extensions.kubernetes.manifests``), against the reviewed
snapshot in snapshots/kubernetes/, and each validated against the Kubernetes OpenAPI schemas (kubernetes-validate,
strict: an unknown field is an error).

``CELLGATE_UPDATE_SNAPSHOTS=1`` writes the files and fails; review the diff and rerun.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from conftest import SNAPSHOTS
from pydantic import ValidationError
from snapshot_files import matches_snapshot

from cellgate.extensions.kubernetes import manifests
from cellgate.extensions.kubernetes.manifests import GatePeer, KernelKeys, KernelSession, Owner

GOLDEN = SNAPSHOTS / "kubernetes"
# The schemas' version: a recent Kubernetes (GKE's regular channel and most distributions have it).
KUBERNETES = "1.35.0"

# A fixed keypair, made for this test with zmq.curve_keypair() (no secret of anyone's).
KEYS = KernelKeys(key="0f" * 32, curve_publickey="iL^Ig<m7@^V6Wv6fB?y8enklxL&5}XFaAQh?8*C$",
                  curve_secretkey="TaSLvjd3?.Gaj080^[OWINlTkg2!YjBZ82U7j$1m")
TOOLS = {"tools/__init__.py": '"""The tools of this session."""\nfrom . import crm\n',
         "tools/aio.py": '"""async twins"""\n',
         "tools/crm/__init__.py": 'def find_customer(name: str) -> dict:\n    """Find a customer by name."""\n'}
GATE = {"app.kubernetes.io/name": "cellgate-gate"}


def session(**changes: Any) -> KernelSession:
    fields: dict[str, Any] = {
        "session_id": "cg-0123456789ab", "namespace": "cellgate", "image": "cellgate/kernel:0.1.0",
        "gate": GatePeer(pod_labels=GATE), "memory_mb": 1024, "cpus": 0.5, "tmp_mb": 64, "workspace_mb": 128,
        "deadline_seconds": 3600,
        "owner": Owner(name="cellgate-gate-7d9f8-abcde", uid="4b2d7c1e-0000-4000-8000-000000000001"),
    }
    return KernelSession(**{**fields, **changes})


def validate(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def matches_snapshot_yaml(name: str, objects: list[dict[str, Any]]) -> None:
    matches_snapshot(GOLDEN / name, yaml.safe_dump_all(objects, sort_keys=False, width=120), "the session's objects")


def test_a_sessions_objects_match_the_snapshot_and_the_kubernetes_schemas() -> None:
    objects = manifests.session_objects(session(), KEYS, TOOLS)
    assert [o["kind"] for o in objects] == ["NetworkPolicy", "Secret", "ConfigMap", "Pod"]  # policy first
    for obj in objects:
        validate(obj)
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "cellgate"
        assert obj["metadata"]["labels"]["cellgate.dev/session"] == "cg-0123456789ab"
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "4b2d7c1e-0000-4000-8000-000000000001"
    matches_snapshot_yaml("session.yaml", objects)


def test_the_pod_is_gvisor_non_root_read_only_without_capabilities_token_or_service_links() -> None:
    pod = manifests.kernel_pod(session(), TOOLS)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["activeDeadlineSeconds"] == 3600 and spec["restartPolicy"] == "Never"
    assert "hostNetwork" not in spec and "hostPID" not in spec and "hostIPC" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]} and security["runAsNonRoot"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"} and security["privileged"] is False
    limits = {"cpu": "500m", "memory": "1024Mi"}
    assert container["resources"] == {"requests": limits, "limits": limits}
    assert container["command"][:5] == ["python", "-m", "cellgate.kernel", "-f", "/run/cellgate/conn/kernel.json"]
    assert [p["containerPort"] for p in container["ports"]] == [5001, 5002, 5003, 5004, 5005]
    # Only the Secret and the ConfigMap come from outside the pod, read-only; /tmp and /workspace are bounded.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["connection"]["readOnly"] is True and mounts["tools"]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert set(volumes) == set(mounts)
    assert volumes["connection"]["secret"]["secretName"] == "cellgate-conn-cg-0123456789ab"
    assert volumes["tools"]["configMap"]["name"] == "cellgate-tools-cg-0123456789ab"
    assert volumes["tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert volumes["workspace"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "128Mi"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["PYTHONPATH"] == "/opt/cellgate/tools" and mounts["tools"]["mountPath"] == "/opt/cellgate/tools"
    assert env["CELLGATE_RLIMIT_AS"] == str(int((1024 << 20) * 0.9))
    assert "CELLGATE_OUTPUT_LOG" not in env and "CELLGATE_SNAPSHOT_READY" not in env


def test_the_network_policy_has_no_egress_and_admits_only_the_gate_to_the_kernel_ports() -> None:
    policy = manifests.network_policy(session())["spec"]
    assert policy["podSelector"] == {"matchLabels": {"app.kubernetes.io/managed-by": "cellgate",
                                                     "cellgate.dev/session": "cg-0123456789ab"}}
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["egress"] == []
    (rule,) = policy["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": GATE}}]
    assert sorted(p["port"] for p in rule["ports"]) == [5001, 5002, 5003, 5004, 5005]

    other = session(gate=GatePeer(pod_labels=GATE, namespace="agents"), owner=None)
    policy = manifests.network_policy(other)
    validate(policy)
    assert policy["spec"]["ingress"][0]["from"] == [{
        "podSelector": {"matchLabels": GATE},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agents"}},
    }]
    assert "ownerReferences" not in policy["metadata"]


def test_the_secret_holds_the_connection_file_with_the_curve_keypair_ipykernel_reads() -> None:
    secret = manifests.connection_secret(session(), KEYS)
    assert secret["immutable"] is True and set(secret["data"]) == {"kernel.json"}
    info = json.loads(base64.b64decode(secret["data"]["kernel.json"]))
    assert info == {
        "shell_port": 5001, "iopub_port": 5002, "stdin_port": 5003, "control_port": 5004, "hb_port": 5005,
        "transport": "tcp", "ip": "0.0.0.0", "key": "0f" * 32, "signature_scheme": "hmac-sha256",
        "kernel_name": "cellgate", "curve_publickey": KEYS.curve_publickey, "curve_secretkey": KEYS.curve_secretkey,
    }
    assert "0f0f" not in repr(KEYS) and KEYS.curve_secretkey not in repr(KEYS)
    assert manifests.connection_file(KEYS, ip="10.8.0.7")["ip"] == "10.8.0.7"  # the gate's side


def test_the_config_map_holds_the_tools_package_under_keys_the_pod_maps_back_to_paths() -> None:
    config_map = manifests.tools_config_map(session(), TOOLS)
    assert config_map["data"] == {"tools.__init__.py": TOOLS["tools/__init__.py"],
                                  "tools.aio.py": TOOLS["tools/aio.py"],
                                  "tools.crm.__init__.py": TOOLS["tools/crm/__init__.py"]}
    items = manifests.kernel_pod(session(), TOOLS)["spec"]["volumes"][1]["configMap"]["items"]
    assert items == [{"key": "tools.__init__.py", "path": "tools/__init__.py"},
                     {"key": "tools.aio.py", "path": "tools/aio.py"},
                     {"key": "tools.crm.__init__.py", "path": "tools/crm/__init__.py"}]
    validate(manifests.tools_config_map(session(), {}))


@pytest.mark.parametrize(("changes", "says"), [
    ({"session_id": "CG_1"}, "session id 'CG_1' must be a DNS label"),
    ({"session_id": "cg-" + "0" * 40}, "at most 40 characters"),
    ({"namespace": "Team A"}, "'Team A' is not a Kubernetes object name"),
    ({"gate": {"pod_labels": {}}}, "give the gate's pod labels or its namespace"),
    ({"gate": {"pod_labels": {"app": "bad value!"}}}, "label app='bad value!'"),
    ({"labels": {"cellgate.dev/session": "x"}}, "are set by cellgate"),
    ({"cpus": 0}, "greater than 0"),
])
def test_bad_input_is_a_clear_error_naming_the_value(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(says)):
        session(**changes)


def test_tools_that_cannot_be_a_config_map_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"tools file '\.\./x\.py' cannot be a ConfigMap key"):
        manifests.tools_config_map(session(), {"../x.py": ""})
    with pytest.raises(ValueError, match="a ConfigMap holds at most 1048576"):
        manifests.tools_config_map(session(), {"tools/__init__.py": "x" * (1 << 20)})
    with pytest.raises(ValidationError, match="40 Z85 characters"):
        KernelKeys(key="0f" * 32, curve_publickey="short", curve_secretkey=KEYS.curve_secretkey)
