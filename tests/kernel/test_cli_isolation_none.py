"""`cellgate exec --isolation none`: the kernel runs as a local subprocess, said aloud and recorded."""

from __future__ import annotations

from pathlib import Path

import nbformat
from conftest import cellgate


def test_isolation_none_is_explicit_and_recorded(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print('unsandboxed')\n")
    done = cellgate("exec", str(program), "--isolation", "none", "--notebook", str(tmp_path / "nb.ipynb"))
    assert done.returncode == 0, done.stderr
    assert "WITHOUT gVisor" in done.stderr
    nb = nbformat.read(tmp_path / "nb.ipynb", as_version=4)
    assert nb.metadata.cellgate.sandbox.isolation == "none"
