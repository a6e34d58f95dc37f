"""Layout rules from STYLE.md, checked rather than hoped for."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import ROOT


def test_cellgate_is_a_namespace_package() -> None:
    for part in ("kernel", "gate", "extensions"):
        assert not (ROOT / part / "cellgate" / "__init__.py").exists()


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in done.stdout


def test_the_contracts_state_the_architecture() -> None:
    """The rules STYLE.md and ARCHITECTURE.md state are contracts (so the count above cannot pass with them gone)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = [c for c in contracts if c["type"] == "layers"]
    assert [(c["containers"], c["layers"]) for c in layers] == [
        (["cellgate.gate"], ["ops", "session | review", "audit", "network", "calls", "sandbox"]),
        (["cellgate.gate.session"], ["relay", "cells", "kernel", "context", "events | bounds"])]
    forbidden = {(tuple(c["source_modules"]), tuple(c["forbidden_modules"])) for c in contracts
                 if c["type"] == "forbidden"}
    assert (("cellgate.kernel",), ("cellgate.gate", "cellgate.extensions")) in forbidden
    assert (("cellgate.gate",), ("cellgate.extensions",)) in forbidden
    assert (("cellgate.gate.sandbox",), ("cellgate.gate.calls", "cellgate.gate.audit")) in forbidden
    assert (("cellgate.extensions",), ("cellgate.gate.*",)) in forbidden
    face = next(c for c in contracts if c["type"] == "forbidden" and c["source_modules"] == ["cellgate.extensions"])
    assert face.get("ignore_imports") == ["cellgate.extensions.** -> cellgate.gate.ext"]  # of the gate's modules, ext
    kernel_rule = next(f for s, f in forbidden if s == ("cellgate.gate",) and "cellgate.kernel.runtime" in f)
    assert {"cellgate.kernel.kernel", "cellgate.kernel.outlog", "cellgate.kernel.snapshot"} <= set(kernel_rule)


def test_light_imports_stay_light() -> None:
    """The policy, the config (with every extension's section) and the CLI's parser import no heavy dependency:
    jsonschema alone takes seconds where rfc3987_syntax is installed; the Session brings jupyter_client and zmq."""
    code = ("import sys; import cellgate.gate, cellgate.gate.calls.policy, cellgate.gate.calls.registry, "
            "cellgate.gate.ops.cli; from cellgate.gate.config import load_settings; load_settings(None); "
            "from importlib.metadata import entry_points; [e.load() for e in entry_points(group='cellgate.commands')]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'jupyter_client', 'zmq', "
            "'docstring_parser', 'nbformat', 'anthropic', 'mcp', 'httpx2') or m.startswith('cellgate.gate.session')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_kernel_side_depends_only_on_ipykernel_and_the_stdlib() -> None:
    code = ("import sys; import cellgate.kernel.kernel, cellgate.kernel.runtime; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'jsonschema', 'nbformat', 'rich', 'docstring_parser') or m.startswith('cellgate.gate')); "
            "print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
