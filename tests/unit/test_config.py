"""cellgate.toml parsing: clear errors that name the key and say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.config import find_config, load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cellgate.toml"
    path.write_text(text)
    return path


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[tools]\nmodules = ["t.py"]\n'))
    assert settings.sandbox.isolation == "gvisor" and settings.sandbox.memory_mb == 1024
    assert settings.tool_paths() == [(tmp_path / "t.py").resolve()]
    assert settings.source == str(tmp_path / "cellgate.toml")
    assert load_settings(None, str(tmp_path)).source is None


@pytest.mark.parametrize(("text", "fragment"), [
    ("[sandbox]\nnetwork = 'host'\n", "unknown key 'sandbox.network'"),
    ("[sandbox]\nisolation = 'docker'\n", "sandbox.isolation = 'docker'"),
    ("[sandbox]\nmemory_mb = 1\n", "sandbox.memory_mb = 1"),
    ("[tools\nmodules = []\n", "not valid TOML"),
    ("[polcy]\n", "unknown key 'polcy'"),
    ("source = 'elsewhere.toml'\n", "unknown key 'source'"),  # set from where the file is, never by it
    ("base_dir = '/'\n", "unknown key 'base_dir'"),
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


@pytest.mark.parametrize(("text", "fragment"), [
    ("[agent]\nmodel = 'm'\nturns = 3\n", "cellgate.toml:3: unknown key 'agent.turns'"),
    ("[agent]\nmode = 'shell'\n", "cellgate.toml:2: agent.mode = 'shell'"),
    ("[mcp.servers.crm]\nurl = 'http://x'\nheaders = {}\ncommand = 'srv'\n",
     "cellgate.toml:1: mcp.servers.crm = {"),
    ("[mcp.servers.crm]\ncommand = 'srv'\nenviron = {}\n", "cellgate.toml:3: unknown key 'mcp.servers.crm.environ'"),
    ("[mcp.servers.class]\ncommand = 'srv'\n", "server name 'class' becomes tools.class"),
])
def test_extension_sections_are_validated_with_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    assert fragment in str(info.value)


def test_extension_sections_are_typed_and_default_when_absent(tmp_path: Path) -> None:
    from cellgate.extensions.anthropic.config import AgentSettings
    from cellgate.extensions.mcp.config import McpConfig

    settings = load_settings(write(tmp_path, "[agent]\nmax_turns = 3\n\n[mcp.servers.crm]\ncommand = 'srv'\n"))
    assert settings.section("agent", AgentSettings).max_turns == 3
    assert settings.section("mcp", McpConfig).servers["crm"].command == "srv"
    assert settings.configured_sections() == ["agent", "mcp"]
    with pytest.raises(TypeError, match=r"\[agent\] of cellgate.toml is a AgentSettings, not a McpConfig"):
        settings.section("agent", McpConfig)
    empty = load_settings(write(tmp_path, "[mcp]\nservers = {}\n"))
    assert empty.section("agent", AgentSettings) == AgentSettings()
    assert empty.configured_sections() == []  # a section equal to its defaults opens no tool source


def test_the_core_names_no_extension() -> None:
    from cellgate.gate.config import Settings

    assert not {"agent", "mcp"} & set(Settings.model_fields)
