"""A record is continued (a kernel restart, ``Session.resume``) only with the setup it was made with (issue 43, suite
item 1 and new-user item 7): a changed tool set, policy or sandbox setting is refused, and the refusal names what
the record expects and what is there now.

The metadata is made as every session makes it (``session.launch.session_metadata``) and read back as the recorder
wrote it (JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cellgate.gate.audit.resume import setup_changes
from cellgate.gate.calls.registry import ToolRegistry, tool_from_function
from cellgate.gate.config import load_settings
from cellgate.gate.session.launch import session_metadata

RUNTIME = {"image": {"name": "minimal", "digest": "sha256:aa"}, "network": "none"}


def echo(text: str) -> str:
    """Say it back."""
    return text


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def add_floats(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


def metadata(tmp_path: Path, config: str = "", tools: tuple[Any, ...] = (echo, add),
             modules: tuple[str, ...] = ("/srv/project/tools.py",)) -> dict[str, Any]:
    """A session's metadata as the recorder keeps it: made by session_metadata, then written as JSON and read."""
    folder = tmp_path / f"config-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / "cellgate.toml").write_text(config)
    settings = load_settings(folder / "cellgate.toml")
    registry = ToolRegistry(tool_from_function(f, name=f.__name__ if f is not add_floats else "add") for f in tools)
    made = session_metadata(settings, registry, RUNTIME, [Path(m) for m in modules], "s-1", {})
    return json.loads(json.dumps(made))


def test_the_same_setup_is_no_change(tmp_path: Path) -> None:
    config = '[policy]\ndefault = "allow"\n\n[sandbox]\nmemory_mb = 512\n'
    assert setup_changes(metadata(tmp_path, config), metadata(tmp_path, config)) == []


def test_a_changed_tool_set_names_the_record_s_tools_and_the_current_ones(tmp_path: Path) -> None:
    (said,) = setup_changes(metadata(tmp_path), metadata(tmp_path, tools=(echo,)))
    assert said == "tools (the record's: add, echo; now: echo)"


def test_a_changed_signature_names_the_tool_and_other_modules_are_named(tmp_path: Path) -> None:
    (said,) = setup_changes(metadata(tmp_path), metadata(tmp_path, tools=(echo, add_floats),
                                                             modules=("/srv/other/tools.py",)))
    assert said == ("tools (add: another description, parameters or result; from the record's sources: "
                    "/srv/project/tools.py; now: /srv/other/tools.py)")


def test_a_changed_policy_is_a_change_naming_each_key_with_its_values(tmp_path: Path) -> None:
    before = metadata(tmp_path, '[policy]\ndefault = "allow"\nmax_calls_per_session = 100\n')
    after = metadata(tmp_path, '[policy]\ndefault = "deny"\nmax_calls_per_session = 5\n\n'
                               '[policy.tools.echo]\ndecision = "approve"\n')
    (said,) = setup_changes(before, after)
    assert said.startswith("policy (") and said.endswith(")"), said
    assert 'default: "allow" -> "deny"' in said and "max_calls_per_session: 100 -> 5" in said, said
    assert '"approve"' in said and "echo" in said, said


def test_a_changed_sandbox_setting_is_a_change_naming_the_setting(tmp_path: Path) -> None:
    (said,) = setup_changes(metadata(tmp_path, "[sandbox]\nmemory_mb = 512\n"),
                            metadata(tmp_path, "[sandbox]\nmemory_mb = 1024\n"))
    assert said == "sandbox (limits.memory_mb: 512 -> 1024)"
    (said,) = setup_changes(metadata(tmp_path, "[sandbox]\npids = 256\n"),
                            metadata(tmp_path, "[sandbox]\npids = 512\ntmp_mb = 128\n"))
    assert said == "sandbox (limits.pids: 256 -> 512; limits.tmp_mb: 256 -> 128)", said


def test_a_long_change_stays_bounded(tmp_path: Path) -> None:
    many = "".join(f'[policy.tools.t{i}]\ndecision = "deny"\n\n' for i in range(40))
    (said,) = setup_changes(metadata(tmp_path), metadata(tmp_path, many))
    assert len(said) < 600 and said.endswith("and 34 more)"), said
    assert said.startswith('policy (tools.t0: (unset) -> {"decision": "deny"'), said
    huge = metadata(tmp_path, tools=(echo,))
    huge["tools"]["manifest"] = [{"name": f"tool_{i}_{'x' * 40}"} for i in range(100)]
    huge["tools"]["manifest_sha256"] = "other"
    (said,) = setup_changes(metadata(tmp_path), huge)
    assert len(said) < 600, said

