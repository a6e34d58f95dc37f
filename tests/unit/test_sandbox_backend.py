"""The sandbox backend seam: ``[sandbox] backend`` and the ``cellgate.sandbox_backends`` entry points."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.config import SandboxSettings, Settings, load_settings
from cellgate.gate.ext import SandboxBackend
from cellgate.gate.sandbox.backend import SandboxRequest, endpoint
from cellgate.gate.sandbox.backends import BACKENDS_GROUP, installed_backends, load_backend
from cellgate.gate.sandbox.environment import request_environment
from cellgate.gate.sandbox.local.local_backend import LocalBackend
from cellgate.gate.session.launch import LaunchOptions, settings_for


def _install(site: Path, monkeypatch: pytest.MonkeyPatch, entries: dict[str, str]) -> None:
    """A distribution on ``sys.path`` that registers ``entries`` as sandbox backends (found as any installed one)."""
    info = site / "scratchbackend-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scratchbackend\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[{BACKENDS_GROUP}]\n{lines}")
    (site / "scratch_backend.py").write_text(textwrap.dedent('''
        from cellgate.gate.ext import SandboxBackend

        class Scratch(SandboxBackend):
            name = "scratch"
            start = connection_info = kill = wait = status = delete = describe = None
            def reap(self):
                return ["reaped-by-scratch"]

        NOT_A_BACKEND = object()
    '''))
    monkeypatch.syspath_prepend(str(site))


def test_the_backend_is_local_unless_configured() -> None:
    assert Settings().sandbox.backend == "local"
    assert installed_backends()["local"] == "cellgate.gate.sandbox.local.local_backend:LocalBackend"
    assert load_backend("local") is LocalBackend  # found through its entry point, like any other


def test_a_package_that_registers_local_again_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path / "site", monkeypatch, {"local": "scratch_backend:Scratch"})
    with pytest.raises(ConfigError, match=r"'local' is registered more than once .*scratch_backend:Scratch.*"
                                          r"uninstall all but one"):
        load_backend("local")


def test_an_unknown_backend_names_the_value_and_the_installed_ones(tmp_path: Path) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text('[sandbox]\nmemory_mb = 512\nbackend = "kubernetess"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    message = str(caught.value)
    assert f"{config}:3" in message and "'kubernetess'" in message and "installed: kubernetes, local" in message
    with pytest.raises(ConfigError,
                       match=r"backend = 'nope' is not an installed sandbox backend \(installed: kubernetes, local\)"):
        load_backend("nope")


def test_a_per_session_override_is_checked_like_the_file() -> None:
    with pytest.raises(ConfigError, match="'nope' is not an installed sandbox backend"):
        settings_for(LaunchOptions(settings=Settings(), sandbox={"backend": "nope"}), None)
    chosen = settings_for(LaunchOptions(settings=Settings(), sandbox={"backend": "local"}), None)
    assert chosen.sandbox.backend == "local"


def test_an_extension_backend_is_found_by_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, monkeypatch, {"scratch": "scratch_backend:Scratch", "broken": "scratch_backend:NOT_A_BACKEND"})
    assert SandboxSettings(backend="scratch").backend == "scratch"
    backend_type = load_backend("scratch")
    assert issubclass(backend_type, SandboxBackend) and backend_type.name == "scratch"
    assert backend_type(Settings()).reap() == ["reaped-by-scratch"]
    with pytest.raises(ConfigError, match=r"entry point broken = 'scratch_backend:NOT_A_BACKEND' .* does not name a "
                                          "SandboxBackend subclass"):
        load_backend("broken")


def test_endpoints_from_connection_info() -> None:
    ipc = {"transport": "ipc", "ip": "/run/x/k", "shell_port": 1, "iopub_port": 2}
    tcp = {"transport": "tcp", "ip": "10.0.0.7", "shell_port": 5555, "control_port": 5558}
    assert endpoint(ipc, "iopub") == "ipc:///run/x/k-2"
    assert endpoint(tcp, "control") == "tcp://10.0.0.7:5558"


def test_a_request_gives_a_remote_kernel_the_local_environment() -> None:
    box = SandboxSettings(memory_mb=512, restricted=True, allowed_imports=["numpy"])
    request = SandboxRequest.from_settings(box, {}, "k" * 64, "s" * 32)
    env = request_environment(request, ["/opt/kernel"])
    assert env["PYTHONPATH"] == "/opt/cellgate/tools:/opt/kernel"
    assert "k" * 64 not in env.values()  # the key travels in the connection file only
    assert env["CELLGATE_RESTRICTED"] == '["numpy"]'


def test_doctor_clean_reaps_the_backend_it_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cellgate.gate.ops.doctor import _reap

    _install(tmp_path / "site", monkeypatch, {"scratch": "scratch_backend:Scratch"})
    monkeypatch.chdir(tmp_path)  # no cellgate.toml: the backend gets the defaults
    monkeypatch.delenv("CELLGATE_CONFIG", raising=False)
    assert _reap("scratch") == ["reaped-by-scratch"]
    with pytest.raises(ConfigError, match="'nope' is not an installed sandbox backend"):
        _reap("nope")


def test_the_request_is_neutral_and_the_local_backend_adds_its_own_keys(tmp_path: Path) -> None:
    from cellgate.gate.sandbox.local import enforcement

    settings = Settings(sandbox=SandboxSettings(isolation="none", workspace=str(tmp_path), memory_mb=640,
                                                require_hard_limits=True, start_timeout=12.0))
    request = SandboxRequest.from_settings(settings.sandbox, {"x.py": ""}, "k" * 64, "s" * 32)
    assert not hasattr(request, "config") and request.limits.memory_bytes == 640 << 20
    assert request.start_timeout == 12.0 and request.restricted is None and request.image is None
    backend = LocalBackend(settings)
    config = backend.launch_config(request)
    assert config.limits is request.limits and config.start_timeout == 12.0
    assert (config.isolation, config.runsc, config.workspace, config.snapshot, config.require_hard_limits) == \
        ("none", None, str(tmp_path), False, True)  # no snapshot without gVisor
    assert backend.runtime()["limits_enforced"] == enforcement.report(os.geteuid() != 0, "none", None)
