"""A fake cluster for the Kubernetes backend's tests: the API server, its test kubelet, a kubeconfig.

Needs root (network namespaces, runsc), ``ip``, ``unshare`` and ``nft``. See README.md, "Kubernetes".
"""

from __future__ import annotations

import json
import queue
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cellgate.gate.sandbox.local.runsc import Runsc

from .apiserver import FakeApiServer
from .kubelet import TestKubelet

NAMESPACE = "cellgate"
TOOLS = ("ip", "nft", "unshare")
KERNEL_OBJECTS = ("pods", "secrets", "configmaps", "networkpolicies")


class FakeCluster:
    def __init__(self, api: FakeApiServer, kubelet: TestKubelet, folder: Path) -> None:
        self.api = api
        self.kubelet = kubelet
        self.folder = folder
        self.kubeconfig = folder / "kubeconfig"
        self.kubeconfig.write_text(json.dumps(api.kubeconfig(NAMESPACE)))

    def toml(self, pool: int = 0, **kubernetes: Any) -> str:
        """The ``[sandbox]`` and ``[kubernetes]`` lines of a cellgate.toml that runs kernels in this cluster."""
        lines = ['[sandbox]', 'backend = "kubernetes"', f"pool = {pool}", "", "[kubernetes]",
                 f'kubeconfig = "{self.kubeconfig}"', f'namespace = "{NAMESPACE}"']
        lines += [f"{key} = {json.dumps(value)}" for key, value in kubernetes.items()]
        return "\n".join(lines) + "\n"

    def objects(self, plural: str) -> list[dict[str, Any]]:
        return self.api.store.select(plural, NAMESPACE)[0]

    def ready_pods(self) -> set[str]:
        return {o["metadata"]["name"] for o in self.objects("pods")
                if any(c["type"] == "Ready" and c["status"] == "True" for c in o["status"].get("conditions", []))}

    def wait_for_ready_pods(self, names: set[str] | None, count: int, timeout: float = 120) -> set[str]:
        """Wait (woken by each change in the API server) until ``count`` pods not in ``names`` are Ready."""
        self.wait_until(lambda: len(self.ready_pods() - (names or set())) >= count, timeout,
                        f"fewer than {count} new Ready pods")
        return self.ready_pods() - (names or set())

    def wait_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Wait until ``done()``, asked again at each change in the API server; raise TimeoutError saying ``what``
        is still so after ``timeout`` seconds without a change."""
        changes: queue.SimpleQueue[str] = queue.SimpleQueue()

        def heard(plural: str, kind: str, obj: dict[str, Any]) -> None:
            changes.put(plural)  # never blocks: the store holds its lock while it tells its listeners
        self.api.store.listeners.append(heard)
        try:
            while not done():
                try:
                    changes.get(timeout=timeout)
                except queue.Empty:
                    raise TimeoutError(f"{what} after {timeout} s of no change") from None
        finally:
            self.api.store.listeners.remove(heard)

    def owned_names(self) -> set[tuple[str, str]]:
        """(plural, name) of every object the gate makes for a kernel (the pod, its Secret, ConfigMap and
        NetworkPolicy) that is in the cluster now."""
        return {(plural, o["metadata"]["name"]) for plural in KERNEL_OBJECTS for o in self.objects(plural)}


@contextmanager
def fake_cluster(runsc: Runsc, folder: Path) -> Iterator[FakeCluster]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"the fake cluster needs {', '.join(missing)} (Debian: apt-get install iproute2 nftables "
                           "util-linux)")
    api = FakeApiServer().start()
    kubelet = TestKubelet(api.store, runsc, folder / "node").start()
    try:
        yield FakeCluster(api, kubelet, folder)
    finally:
        kubelet.stop()
        api.stop()
