"""cellgate.toml parsing: clear errors that name the key and say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from cellgate.gate.config import find_config, load_settings
from cellgate.gate._errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cellgate.toml"
    path.write_text(text)
    return path


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[tools]\nmodules = ["t.py"]\n'))
    assert settings.sandbox.isolation == "gvisor" and settings.sandbox.memory_mb == 1024
    assert settings.tool_paths() == [(tmp_path / "t.py").resolve()]


@pytest.mark.parametrize(("text", "fragment"), [
    ("[sandbox]\nnetwork = 'host'\n", "unknown key 'sandbox.network'"),
    ("[sandbox]\nisolation = 'docker'\n", "sandbox.isolation = 'docker'"),
    ("[sandbox]\nmemory_mb = 1\n", "sandbox.memory_mb = 1"),
    ("[tools\nmodules = []\n", "not valid TOML"),
    ("[polcy]\n", "unknown key 'polcy'"),
])
def test_malformed_config(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="cellgate.toml") as info:
        load_settings(write(tmp_path, text))
    assert fragment in str(info.value)


def test_find_config_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = write(tmp_path, "")
    monkeypatch.delenv("CELLGATE_CONFIG", raising=False)
    assert find_config(None, str(tmp_path)) == local.resolve()
    other = tmp_path / "other.toml"
    other.write_text("")
    monkeypatch.setenv("CELLGATE_CONFIG", str(other))
    assert find_config(None, str(tmp_path)) == other.resolve()
    with pytest.raises(ConfigError, match="does not exist"):
        find_config(str(tmp_path / "missing.toml"))
