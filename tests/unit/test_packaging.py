"""Layout rules from STYLE.md, checked rather than hoped for."""

from __future__ import annotations

import subprocess
import tomllib
import sys
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


def test_kernel_side_depends_only_on_ipykernel_and_the_stdlib() -> None:
    code = ("import sys; import cellgate.kernel.kernel, cellgate.kernel.runtime; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'jsonschema', 'nbformat', 'rich', 'docstring_parser') or m.startswith('cellgate.gate')); "
            "print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
