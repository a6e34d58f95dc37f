"""Packages through the gate (issue 32): ``%pip install`` is a gated call; wheels only, allowed ones only, recorded
by sha256, put back by replay; the sandbox's network stays ``none``; the session's package layer outlives a kernel
restart and goes with the session (issue 43, suite item 8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import cellgate

from cellgate.gate.calls.packages import wheel_cache
from cellgate.gate.sandbox.runtime_dir import run_root

CONFIG = """
[packages]
allow = ["humanize>=4", "docopt"]

[policy]
default = "deny"

[policy.tools.pip_install]
decision = "allow"
"""

NO_NETWORK = """
import socket
try:
    socket.create_connection(("1.1.1.1", 80), timeout=3)
    print("network: reached")
except OSError as exc:
    print("network: none", type(exc).__name__)
"""


def calls_of(notebook: Path) -> list[dict[str, Any]]:
    nb = nbformat.read(notebook, as_version=4)
    return [call for cell in nb.cells for call in cell.metadata.get("cellgate", {}).get("calls", [])]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("packages") / "cellgate.toml"
    path.write_text(CONFIG)
    return path


def test_an_allowed_wheel_installs_with_no_network_the_rest_is_refused_and_all_of_it_is_recorded(
        session_factory: Any, config: Path, tmp_path: Path) -> None:
    notebook = tmp_path / "run.ipynb"
    box = session_factory(config=str(config), tools=[], notebook=notebook)
    installed = box.execute("%pip install humanize\nimport humanize\nprint(humanize.intcomma(1234567))")
    assert installed.ok, installed.text
    assert "1,234,567" in installed.stdout and "installed humanize==" in installed.stdout
    assert "network: none" in box.execute(NO_NETWORK).stdout

    outside = box.execute("%pip install six")
    assert not outside.ok and "six is not allowed by [packages] allow" in outside.text
    sdist_only = box.execute("%pip install docopt")  # allowed, but PyPI has only its source distribution
    assert not sdist_only.ok
    assert "no wheel of docopt" in sdist_only.text and "never built" in sdist_only.text
    assert box.execute("import docopt").error["ename"] == "ModuleNotFoundError"
    url = box.execute("%pip install https://example.invalid/humanize.whl")
    assert not url.ok and "is not a requirement" in url.text

    # The layer's lifecycle (docs/sandbox-images.md): kept across a kernel restart, removed when the session ends.
    (layer,) = [folder for folder in (run_root() / "packages").iterdir() if any(folder.glob("humanize*"))]
    box.restart()
    again = box.execute("import humanize\nprint(humanize.intcomma(7654321))")
    assert again.ok and "7,654,321" in again.stdout, again.text
    box.close()
    assert not layer.exists(), f"the session ended, its package layer {layer} is still there"

    calls = calls_of(notebook)
    assert [(c["tool"], c["ok"]) for c in calls] == [("pip_install", True), ("pip_install", False),
                                                     ("pip_install", False), ("pip_install", False)]
    (wheel,) = calls[0]["result"]["installed"]
    assert wheel["name"] == "humanize" and wheel["file"].endswith("-py3-none-any.whl")
    cached = wheel_cache() / wheel["sha256"] / wheel["file"]
    import hashlib

    assert hashlib.sha256(cached.read_bytes()).hexdigest() == wheel["sha256"]  # kept by its own hash
    assert "six is not allowed" in calls[1]["error"]["message"]
    assert not any(p.name.startswith("docopt") for p in wheel_cache().glob("*/*"))

    # Replay, with a config that allows no package at all: the recorded wheel goes back in by its hash.
    bare = tmp_path / "elsewhere" / "cellgate.toml"
    bare.parent.mkdir()
    bare.write_text('[policy]\ndefault = "deny"\n')
    replayed = cellgate("replay", str(notebook), "--config", str(bare), "--notebook", str(tmp_path / "replay.ipynb"))
    assert "cell 1: recorded ok, replayed ok" in replayed.stdout, replayed.stdout + replayed.stderr
    again = calls_of(tmp_path / "replay.ipynb")[0]
    assert (again["decision"], again["result"]) == ("replayed", calls[0]["result"])


def test_without_a_policy_for_it_pip_install_is_denied(session_factory: Any, tmp_path: Path) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text('[packages]\nallow = ["humanize"]\n\n[policy]\ndefault = "deny"\n')
    box = session_factory(config=str(config), tools=[], notebook=tmp_path / "run.ipynb")
    denied = box.execute("%pip install humanize")
    assert not denied.ok and "pip_install" in denied.text
    box.close()
    (call,) = calls_of(tmp_path / "run.ipynb")
    assert call["decision"] == "deny" and call["ok"] is False
    assert json.dumps(call).count("humanize") >= 1
