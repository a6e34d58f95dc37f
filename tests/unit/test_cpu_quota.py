"""``[sandbox] cpus`` in the OCI spec, the enforcement report and a rootless start (issue 32, item 6)."""

from __future__ import annotations

import pytest

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.limits import SandboxLimits
from cellgate.gate.sandbox.local import enforcement, oci
from cellgate.gate.sandbox.settings import SandboxSettings

pytestmark = pytest.mark.unit


LAYOUT = oci.Layout(bundle="/r/b", etc="/r/etc", ipc="/r/ipc", conn="/r/conn", tools="/r/tools",
                    python_dirs=("/usr",))


def resources(limits: SandboxLimits) -> dict[str, object]:
    return dict(oci.spec(LAYOUT, limits, ["python"], [], sandbox_id="cg-1")["linux"]["resources"])


def test_a_quota_is_in_the_spec_only_when_asked_for() -> None:
    assert resources(SandboxLimits(cpus=0.5))["cpu"] == {"quota": 50_000, "period": 100_000}
    assert "cpu" not in resources(SandboxLimits())
    assert oci.cpu_quota(0.5) == {"quota": 50_000, "period": 100_000}
    assert oci.cpu_quota(2) == {"quota": 200_000, "period": 100_000}
    assert oci.cpu_quota(0.01) == {"quota": 1000, "period": 100_000}  # the kernel's smallest quota
    assert SandboxLimits.from_settings(SandboxSettings(cpus=0.5)).cpus == 0.5
    assert SandboxLimits.from_settings(SandboxSettings()).cpus is None


def test_the_report_states_the_quota_as_root() -> None:
    assert enforcement.report(False, cpus=0.5)["cpu"]["enforced"] == "whole sandbox"
    assert "CPU quota of 0.5 CPUs" in enforcement.report(False, cpus=0.5)["cpu"]["by"]
    assert enforcement.report(False)["cpu"]["enforced"] == "no"


def test_a_rootless_start_with_cpus_is_refused_naming_why() -> None:
    with pytest.raises(SandboxUnavailable, match=r"\[sandbox\] cpus = 0.5 needs a CPU quota .* as root"):
        enforcement.check_rootless(False, None, cpus=0.5)


@pytest.mark.parametrize("cpus", [0, 0.001, -1, 65])  # below the kernel's 1 ms quota, above the pods' bound
def test_a_quota_out_of_range_is_a_config_error(cpus: float) -> None:
    with pytest.raises(ValueError, match="cpus"):
        SandboxSettings(cpus=cpus)
