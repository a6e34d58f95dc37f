"""README claim (issue 21): `jupyter console --kernel cellgate` gets the same sandbox, gate and audit notebook.

The real jupyter_console is driven without a terminal (`--simple-prompt`, cells on stdin), with the kernelspec
installed into a prefix of the test's own as `cellgate install --prefix` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import cellgate

pytestmark = pytest.mark.gvisor

SAMPLE = Path(__file__).resolve().parent.parent / "tools" / "sample_tools.py"
CELLS = ["import os",
         "print(tools.echo('via console'), os.getuid(), open('/proc/version').read().split()[0])",
         "tools.explode('no')"]



@pytest.fixture(scope="module")
def console_run(tmp_path_factory: pytest.TempPathFactory,
                runsc: object) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One `jupyter console --kernel cellgate` run of CELLS; its output and its audit notebook."""
    tmp_path = tmp_path_factory.mktemp("console")
    prefix = tmp_path / "prefix"
    installed = cellgate("install", "--prefix", str(prefix), timeout=120)
    assert "installed kernelspec 'cellgate'" in installed.stdout, installed.stdout + installed.stderr
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[tools]\nmodules = [{json.dumps(str(SAMPLE))}]\n[audit]\ndir = "audit"\n'
                      '[policy.tools.echo]\ndecision = "allow"\n[policy.tools.explode]\ndecision = "deny"\n')
    env = {**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter"), "CELLGATE_CONFIG": str(config)}
    console = [str(Path(sys.executable).with_name("jupyter-console")), "--kernel", "cellgate", "--simple-prompt"]
    done = subprocess.run(console, input="\n".join(CELLS) + "\n", capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    notebooks = sorted((tmp_path / "audit").glob("*.ipynb"))
    assert len(notebooks) == 1, (notebooks, done.stdout + done.stderr)
    return done, notebooks[0]


def test_jupyter_console_runs_cells_in_the_sandbox_through_the_gate(
        console_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, notebook = console_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert "via console 1000 Linux" in done.stdout, done.stdout  # uid 1000: the sandbox user, not root
    assert "ToolDenied" in done.stderr and "tool 'explode' was denied by policy" in done.stderr, done.stderr
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.cellgate.sandbox.runtime == "gvisor"
    assert [c.source for c in nb.cells] == CELLS
    assert [c.metadata.cellgate.status for c in nb.cells] == ["ok", "ok", "error"]
    echo, denied = nb.cells[1].metadata.cellgate.calls[0], nb.cells[2].metadata.cellgate.calls[0]
    assert (echo["tool"], echo["decision"], echo["result"]) == ("echo", "allow", "via console")
    assert (denied["tool"], denied["decision"]) == ("explode", "deny")


def test_the_audit_record_of_a_console_session_is_complete_after_it_exits(
        console_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, notebook = console_run
    verified = cellgate("verify", str(notebook), timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
