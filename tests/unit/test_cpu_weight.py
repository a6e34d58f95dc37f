"""``cpu_weight.weigh`` (issue 33): the sandboxes' parent cgroup gets a fraction of one process's CPU weight, on
either cgroup layout, and nothing is written where there is no CPU controller. A folder stands in for
/sys/fs/cgroup (what is under test is what gets written where); the real hierarchy is read in
``tests/sandbox/test_cpu_limit.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cellgate.gate import ConfigError
from cellgate.gate.config import load_settings
from cellgate.gate.sandbox.local import cpu_weight

pytestmark = pytest.mark.root_only  # only root writes the sandboxes' parent (runsc makes it only as root)


def test_v1_sets_the_parents_cpu_shares_making_the_parent(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    written = cpu_weight.weigh(1 / 32, root=tmp_path)
    assert written == tmp_path / "cpu" / "cellgate" / "cpu.shares" and written.read_text() == "32"
    assert cpu_weight.weigh(1 / 100_000, root=tmp_path) is not None and written.read_text() == "2"  # the least
    assert cpu_weight.weigh(1, root=tmp_path) is not None and written.read_text() == "1024"


def test_v2_hands_the_cpu_controller_down_and_sets_cpu_weight(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    written = cpu_weight.weigh(1 / 32, root=tmp_path)
    assert written == tmp_path / "cellgate" / "cpu.weight" and written.read_text() == "3"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"  # as the kernel takes it: one change


def test_no_cpu_controller_writes_nothing(tmp_path: Path) -> None:
    assert cpu_weight.weigh(1 / 32, root=tmp_path) is None  # v1 without a cpu hierarchy
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    assert cpu_weight.weigh(1 / 32, root=tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cgroup.controllers", "cgroup.subtree_control"]


def test_the_weight_is_the_hosts_never_a_projects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42, finding 7: one /cellgate cgroup weighs every sandbox of the host, so one project's cellgate.toml
    must not rewrite it for every other gate there; the host's environment sets it."""
    config = tmp_path / "cellgate.toml"
    config.write_text("[sandbox]\nsandboxes_cpu_weight = 64\n")
    with pytest.raises(ConfigError, match=r"sandboxes_cpu_weight = 64.*host-wide setting.*"
                                          r"\$CELLGATE_SANDBOXES_CPU_WEIGHT"):
        load_settings(config)
    config.write_text("[sandbox]\nmemory_mb = 512\n")
    assert load_settings(config).sandbox.sandboxes_cpu_weight == 1 / 32
    monkeypatch.setenv("CELLGATE_SANDBOXES_CPU_WEIGHT", "0.5")
    assert load_settings(config).sandbox.sandboxes_cpu_weight == 0.5
    monkeypatch.setenv("CELLGATE_SANDBOXES_CPU_WEIGHT", "lots")
    with pytest.raises(ConfigError, match=r"CELLGATE_SANDBOXES_CPU_WEIGHT='lots' is not a number"):
        load_settings(config)
