"""Issue 15: the installed kernelspec in real JupyterLab, driven in headless Chromium as a user would.

A notebook in a folder with its own ``cellgate.toml`` and tools module opens on
the ``cellgate`` kernel (Lab launches ``python -m cellgate.gate.session.launcher``).
Through Lab's toolbar and Kernel menu: a cell calls a gated tool, a long cell
is interrupted, the kernel is restarted (the dialog confirmed), a cell finds
its variables gone and another calls a tool; then the kernel is shut down.
Everything is asserted on the page, then in the audit notebook the folder's
config names, which records it all as one session and verifies.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import SAMPLE_TOOLS
from conftest import cellgate as run_cellgate
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, accept_dialog, cell_output, find, menu_command, open_notebook, wait_for
from cellgate.gate.audit.journal import read_journal

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]

CELLS = [
    "total = tools.add(40, 2)\nprint('total', total)",
    "import time\nprint('waiting', flush=True)\ntime.sleep(600)",
    "print(total)",
    "print(tools.echo('after the restart'))",
]
CONFIG = """[tools]
modules = ["tools.py"]

[audit]
dir = "runs"

[policy.tools.add]
decision = "allow"

[policy.tools.echo]
decision = "allow"
"""


def run_selected_cell(driver: WebDriver) -> None:
    """The notebook toolbar's run button: run the selected cell and select the next one."""
    wait_for(lambda: find(driver, '.jp-NotebookPanel-toolbar [data-command="notebook:run-cell-and-select-next"]'),
             30, "the toolbar's run button")[0].click()


def events(journal: Path) -> list[str]:
    return [r["event"] for r in read_journal(journal).records] if journal.is_file() else []


def test_jupyterlab_runs_interrupts_restarts_and_shuts_down_the_cellgate_kernel(
        lab: Lab, browser: WebDriver) -> None:
    folder = lab.root / "lifecycle"
    folder.mkdir()
    (folder / "cellgate.toml").write_text(CONFIG)
    shutil.copy(SAMPLE_TOOLS, folder / "tools.py")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in CELLS])
    nb.metadata["kernelspec"] = {"name": "cellgate", "display_name": "cellgate", "language": "python"}
    name = "lifecycle/work.ipynb"
    lab.put_notebook(name, dict(nb))

    def shown(index: int, text: str, what: str) -> None:
        wait_for(lambda: text in cell_output(browser, index), 180, what, show=lambda: cell_output(browser, index))

    try:
        assert open_notebook(browser, lab, name)["name"] == "cellgate"
        (journal,) = wait_for(lambda: list((folder / "runs").glob("*.journal.jsonl")), 60,
                              "the audit journal in the folder's runs/ (its cellgate.toml)")
        run_selected_cell(browser)
        shown(0, "total 42", "the gated call's result under cell 1")
        run_selected_cell(browser)
        shown(1, "waiting", "the long cell's first output")
        menu_command(browser, "Kernel", "kernelmenu:interrupt")
        shown(1, "KeyboardInterrupt", "the interrupted cell's KeyboardInterrupt")

        menu_command(browser, "Kernel", "kernelmenu:restart")
        accept_dialog(browser, "Restart Kernel?")
        # The new launcher has attached its kernel to the same record, and the page's kernel is idle again.
        wait_for(lambda: events(journal).count("kernel-attached") == 2, 180,
                 "the restarted kernel to be attached to the same audit notebook", show=lambda: events(journal))
        wait_for(lambda: (lab.session_kernel(name) or {}).get("execution_state") == "idle", 60,
                 "the restarted kernel to be idle", show=lambda: lab.session_kernel(name))
        run_selected_cell(browser)
        shown(2, "NameError", "the NameError of a variable the restart cleared")
        assert "name 'total' is not defined" in cell_output(browser, 2)
        run_selected_cell(browser)
        shown(3, "after the restart", "the gated call's result after the restart")
        assert cell_output(browser, 0).strip() == "total 42"  # earlier outputs are still on the page

        menu_command(browser, "Kernel", "kernelmenu:shutdown")
        wait_for(lambda: not lab.kernels(), 120, "the kernel to shut down", show=lab.kernels)
    finally:
        lab.shutdown_kernels()
    wait_for(lambda: events(journal)[-1:] == ["session-ended"], 60, "the record to end",
             show=lambda: events(journal)[-3:])

    # The audit notebook: one session, the restart a note where it happened.
    (notebook,) = sorted((folder / "runs").glob("*.ipynb"))
    recorded = nbformat.read(notebook, as_version=4)
    assert [c.source for c in recorded.cells if c.cell_type == "code"] == CELLS
    add, long, restart, after, echo = recorded.cells
    assert [(c["tool"], c["seq"], c["result"]) for c in add.metadata.cellgate.calls] == [("add", 1, 42)]
    assert long.metadata.cellgate.status == "interrupted"
    assert restart.cell_type == "markdown" and restart.source.startswith("**The kernel was restarted"), restart
    assert after.metadata.cellgate.status == "error"
    assert [o.get("ename") for o in after.outputs] == ["NameError"]
    assert [(c["tool"], c["seq"], c["result"]) for c in echo.metadata.cellgate.calls] == [
        ("echo", 2, "after the restart")]
    records = read_journal(journal).records
    assert [r.get("reason") for r in records if r["event"] == "kernel-restarted"] == ["frontend"]
    assert [r["event"] for r in records].count("session-started") == 1
    assert "kernel-died" not in [r["event"] for r in records]

    # A full shutdown leaves the launchers' restart state nothing to continue.
    state = lab.root.parent / "jupyter_runtime_dir" / "cellgate"
    assert state.is_dir(), f"the launcher kept no restart state in {state}"
    assert not list(state.glob("launch-*.json")), sorted(p.name for p in state.iterdir())

    done = run_cellgate("verify", str(notebook), cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
