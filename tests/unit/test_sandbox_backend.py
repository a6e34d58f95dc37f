"""The sandbox backend seam: ``[sandbox] backend`` and the ``cellgate.sandbox_backends`` entry points."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.config import SandboxSettings, Settings, load_settings
from cellgate.gate.ext import SandboxBackend
from cellgate.gate.sandbox.backend import BACKENDS_GROUP, SandboxRequest, endpoint, installed_backends, load_backend
from cellgate.gate.sandbox.local_backend import LocalBackend
from cellgate.gate.session.launch import LaunchOptions, sandbox_config, settings_for


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
    assert installed_backends()["local"] == "cellgate.gate.sandbox.local_backend:LocalBackend"
    assert load_backend("local") is LocalBackend


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
    request = SandboxRequest(sandbox_config(box, None), {}, "k" * 64, "s" * 32)
    env = request.kernel_environment(["/opt/kernel"])
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
