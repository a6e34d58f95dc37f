"""docs/live-sessions.md:109-111 (issue 43, suite item 8): "The Kubernetes backend does not checkpoint kernel pods
yet ... until then a `checkpoint` there says the backend cannot." With the fake cluster of ``tests/kube`` (real
gVisor pods over TCP + Curve), ``cellgate exec --checkpoint`` runs the program in a pod and is refused at the
checkpoint with that sentence, naming the backend, making no checkpoint folder and leaving no pod behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cellgate
from kube.cluster import FakeCluster, fake_cluster

pytestmark = pytest.mark.root_only  # network namespaces, veth pairs and nftables


@pytest.fixture(scope="module")
def cluster(runsc: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    with fake_cluster(runsc, tmp_path_factory.mktemp("kube")) as found:
        yield found


def test_a_checkpoint_of_a_kubernetes_session_says_the_backend_cannot(cluster: FakeCluster, tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text(cluster.toml())
    (tmp_path / "load.py").write_text("x = 41\nprint(x + 1)\n")
    done = cellgate("exec", "load.py", "--notebook", "run.ipynb", "--checkpoint", "run.checkpoint", cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert done.stdout == "42\n"  # the program ran in its pod before the checkpoint was refused
    assert "cannot be checkpointed: its sandbox backend (kubernetes) cannot checkpoint a live kernel" in said, said
    assert "Traceback" not in said
    assert not (tmp_path / "run.checkpoint").exists()
    assert [p["metadata"]["name"] for p in cluster.objects("pods")] == []
