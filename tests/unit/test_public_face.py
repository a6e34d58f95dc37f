"""The two faces of the gate (issue 30): ``cellgate.gate`` for a library's users, ``cellgate.gate.ext`` for
extension authors; small, disjoint, lazy, and every name they promise resolves."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import cellgate.gate as face
import cellgate.gate.ext as ext

ROOMS = ("cellgate.gate.session", "cellgate.gate.calls", "cellgate.gate.audit", "cellgate.gate.sandbox",
         "cellgate.gate.ops", "cellgate.gate.config", "cellgate.gate.telemetry")


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_face_has_at_most_20_public_names() -> None:
    """The issue's own measure, in a fresh interpreter: 20 with SyncSession (#31)."""
    count = _python("import cellgate.gate as g; print(len([n for n in dir(g) if not n.startswith('_')]))")
    assert int(count) <= 20, f"cellgate.gate has {count} public names; put the new one in cellgate.gate.ext"


def test_the_face_holds_what_a_user_needs() -> None:
    assert {"Session", "Pool", "CellResult", "Tool", "ToolRegistry", "Settings", "Secret", "CellgateError",
            "ConfigError", "SessionError"} <= set(face.__all__)
    assert sorted(n for n in dir(face) if not n.startswith("_")) == sorted(face.__all__)


def test_the_faces_do_not_overlap() -> None:
    assert not set(face.__all__) & set(ext.__all__)
    assert sorted(n for n in dir(ext) if not n.startswith("_")) == sorted(ext.__all__)


@pytest.mark.parametrize("module", [face, ext], ids=["cellgate.gate", "cellgate.gate.ext"])
def test_every_name_promised_resolves(module: object) -> None:
    """What the lead re-points at merge when modules move: a stale entry fails here, not in a user's program."""
    for name in module.__all__:  # type: ignore[attr-defined]
        assert getattr(module, name) is not None, name


@pytest.mark.parametrize("module", [face, ext], ids=["cellgate.gate", "cellgate.gate.ext"])
def test_an_unknown_name_is_an_attribute_error_naming_the_module(module: object) -> None:
    name = getattr(module, "__name__")
    with pytest.raises(AttributeError, match=rf"module '{name}' has no attribute 'verify_run_x'"):
        getattr(module, "verify_run_x")


def test_the_faces_are_lazy() -> None:
    """Importing either face imports no room (the CLI's light commands start fast); a name imports its own."""
    code = ("import sys; import cellgate.gate, cellgate.gate.ext; "
            f"print(sorted(m for m in sys.modules if m.startswith({ROOMS!r})))")
    assert _python(code) == "[]"
    code = "import sys; from cellgate.gate.ext import trim; print('cellgate.gate.calls.redaction' in sys.modules)"
    assert _python(code) == "True"


def test_every_name_an_extension_imports_from_the_face_or_ext_is_there() -> None:
    """Extensions import lazily (a framework's module loads on first use), so a name dropped from the face fails
    only when that framework runs: read every import of the two modules from the extensions' sources instead."""
    root = Path(__file__).resolve().parents[2]
    offered = {"cellgate.gate": set(face.__all__), "cellgate.gate.ext": set(ext.__all__)}
    sources = [*(root / "extensions" / "cellgate" / "extensions").rglob("*.py"),
               *(root / "labextension" / "cellgate_jupyterlab").glob("*.py")]
    missing = [(str(path.relative_to(root)), node.module, alias.name)
               for path in sources for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ImportFrom) and node.module in offered
               for alias in node.names if alias.name not in offered[node.module]]
    assert len(sources) > 40  # the extensions were found
    assert missing == []
