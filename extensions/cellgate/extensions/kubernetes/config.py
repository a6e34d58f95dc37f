"""``[kubernetes]`` of cellgate.toml: where the ``kubernetes`` sandbox backend puts a session's kernel pod.

Registered as a config section through the ``cellgate.config_sections`` entry point and read with
``settings.section("kubernetes", KubernetesConfig)``. Light on purpose (pydantic only): every load of
cellgate.toml imports it, the Kubernetes client is not.
"""

from __future__ import annotations

from pydantic import Field

from cellgate.gate.ext import StrictModel


class KubernetesConfig(StrictModel):
    namespace: str = Field(default="cellgate", description="where the kernel pods, their Secrets, ConfigMaps and "
                                                           "NetworkPolicies go")
    image: str = Field(default="cellgate-kernel:0.1.0", description="the kernel image (deploy/kubernetes/Dockerfile)")
    runtime_class: str = Field(default="gvisor", description="the RuntimeClass whose handler is runsc")
    kubeconfig: str | None = Field(default=None, description="a kubeconfig file; none: in the cluster the pod's "
                                                             "service account, else $KUBECONFIG or ~/.kube/config")
    gate_pod_labels: dict[str, str] = Field(default_factory=lambda: {"app.kubernetes.io/name": "cellgate-gate"},
                                            description="the gate's pods: the only peers the kernel's ports accept")
    gate_namespace: str | None = Field(default=None, description="the gate's namespace, when not the kernels'")
    cpus: float = Field(default=1.0, gt=0, le=64, description="each kernel pod's CPU request and limit")
    deadline_seconds: int = Field(default=86400, ge=1, description="a kernel pod's whole life "
                                                                   "(activeDeadlineSeconds)")
