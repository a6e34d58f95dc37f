"""The installed kernelspec from another environment: a venv with only nbclient (and what it needs), no cellgate.

The venv's nbclient finds the spec through JUPYTER_PATH, as a JupyterLab or
VS Code in its own environment would, and runs a notebook: a gated tool call
in gVisor, a long cell it interrupts, a restart, a call after it. The audit
notebook records all of it as one session, and verifies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import SAMPLE_TOOLS, cellgate

from cellgate.gate.audit.journal import read_journal
from cellgate.gate.audit.verify import check_run

# Run by the other environment's Python. The long cell is interrupted as a frontend does it
# (KernelManager.interrupt_kernel: an interrupt_request, the spec's interrupt_mode being "message")
# once its first output has arrived; then the kernel is restarted and one more cell runs.
DRIVER = r'''
import asyncio, sys
import nbformat
from nbclient import NotebookClient

class Frontend(NotebookClient):
    interrupted = False

    def output(self, outs, msg, *args, **kwargs):
        if msg["content"].get("text") == "waiting\n" and not self.interrupted:
            self.interrupted = True
            asyncio.ensure_future(self.km.interrupt_kernel())
        return super().output(outs, msg, *args, **kwargs)

async def main(source, target, folder):
    nb = nbformat.read(source, as_version=4)
    client = Frontend(nb, kernel_name="cellgate", timeout=180, startup_timeout=120, allow_errors=True,
                      resources={"metadata": {"path": folder}})
    async with client.async_setup_kernel():
        for index in range(3):
            await client.async_execute_cell(nb.cells[index], index)
        await client.km.restart_kernel()
        await client.kc.wait_for_ready(timeout=120)
        await client.async_execute_cell(nb.cells[3], 3)
    nbformat.write(nb, target)

asyncio.run(main(*sys.argv[1:]))
'''

CELLS = [
    "total = tools.add(40, 2)\nprint(total)",
    "import time\nprint('waiting', flush=True)\ntime.sleep(600)",
    "print('still here', total)",
    "print('total' in globals(), tools.echo('after the restart'))",
]


@pytest.fixture(scope="module")
def other_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with nbclient from the registry and nothing of cellgate."""
    venv = tmp_path_factory.mktemp("frontend-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "nbclient"], check=True, timeout=600)
    found = subprocess.run([str(python), "-c", "import cellgate"], capture_output=True, text=True, env=_env())
    assert "No module named 'cellgate'" in found.stderr, found
    return python


def _env(**extra: str) -> dict[str, str]:
    """The environment of a frontend that knows nothing of cellgate but where its kernelspec is."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CELLGATE_CONFIG", "VIRTUAL_ENV")}
    return {**env, **extra}


def test_a_frontend_in_another_environment_runs_interrupts_and_restarts_the_kernel(
        other_env: Path, tmp_path: Path, runsc: object) -> None:
    done = cellgate("install", "--prefix", str(tmp_path / "prefix"), check=True)
    assert "installed kernelspec 'cellgate'" in done.stdout
    folder = tmp_path / "notebooks"  # the notebook's folder: the frontend starts the kernel there
    folder.mkdir()
    (folder / "cellgate.toml").write_text(f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[audit]\ndir = "audit"\n\n'
                                          '[policy.tools.echo]\ndecision = "allow"\n\n'
                                          '[policy.tools.add]\ndecision = "allow"\n')
    source, target = folder / "work.ipynb", folder / "work.out.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in CELLS])
    nb.metadata["kernelspec"] = {"name": "cellgate", "display_name": "cellgate", "language": "python"}
    nbformat.write(nb, source)
    (tmp_path / "driver.py").write_text(DRIVER)
    runtime = tmp_path / "runtime"
    ran = subprocess.run(
        [str(other_env), str(tmp_path / "driver.py"), str(source), str(target), str(folder)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=_env(JUPYTER_PATH=str(tmp_path / "prefix" / "share" / "jupyter"), JUPYTER_RUNTIME_DIR=str(runtime)))
    assert ran.returncode == 0, ran.stdout + ran.stderr

    # What the frontend saw.
    executed = nbformat.read(target, as_version=4)
    texts = [[o.get("text", o.get("ename")) for o in cell.outputs] for cell in executed.cells]
    assert texts == [["42\n"], ["waiting\n", "KeyboardInterrupt"], ["still here 42\n"],
                     ["False after the restart\n"]]

    # What the audit notebook says: one session, the restart a note where it happened.
    (notebook,) = sorted((folder / "audit").glob("*.ipynb"))
    recorded = nbformat.read(notebook, as_version=4)
    assert [c.source for c in recorded.cells if c.cell_type == "code"] == CELLS
    add, long, after, restart, echo = recorded.cells
    assert [(c["tool"], c["seq"], c["result"]) for c in add.metadata.cellgate.calls] == [("add", 1, 42)]
    assert long.metadata.cellgate.status == "interrupted"
    assert after.metadata.cellgate.status == "ok"
    assert restart.cell_type == "markdown" and restart.source.startswith("**The kernel was restarted")
    assert [(c["tool"], c["seq"]) for c in echo.metadata.cellgate.calls] == [("echo", 2)]
    records = read_journal(notebook.with_name(notebook.stem + ".journal.jsonl")).records
    events = [r["event"] for r in records]
    assert events.count("session-started") == 1 and events.count("kernel-attached") == 2
    assert [r.get("reason") for r in records if r["event"] == "kernel-restarted"] == ["frontend"]
    # The frontend's shutdown, not a death. The last cell's end may be journalled just before or just after the
    # kernel's exit: nbclient shuts the kernel down as soon as it has the cell's reply and idle, and under load
    # (CI, 2026-12-04) the host recorded the cell's end after the exit once.
    last_attach = len(events) - 1 - events[::-1].index("kernel-attached")
    assert events[-1] == "session-ended" and events[last_attach:].count("kernel-exited") == 1
    assert events[last_attach:].count("cell-ended") == 1
    assert "kernel-died" not in events
    assert check_run(notebook).problems == []
    # A full shutdown leaves nothing to continue.
    assert not list((runtime / "cellgate").glob("launch-*.json")), json.dumps(os.listdir(runtime / "cellgate"))
