"""JupyterLab's "Run all" on the cellgate kernel: every cell is in the audit notebook with its own output.

Run all queues every execute_request on the shell channel at once, so the host reads the kernel's replies (shell)
and outputs (IOPub) for cells well ahead of one another; the record must hold each cell, in order, as nbclient's
one-at-a-time runs do. Real JupyterLab in headless Chromium, the kernel in gVisor.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from conftest import cellgate
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, cell_output, menu_command, open_notebook, wait_for
from cellgate.gate.audit.journal import read_journal

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]

CELLS = [f"print({n})" for n in range(10)]


def events(journal: Path) -> list[str]:
    return [r["event"] for r in read_journal(journal).records] if journal.is_file() else []


def test_run_all_records_every_cell_with_its_output(lab: Lab, browser: WebDriver) -> None:
    folder = lab.root / "runall"
    folder.mkdir()
    (folder / "cellgate.toml").write_text('[audit]\ndir = "runs"\n')
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in CELLS])
    nb.metadata["kernelspec"] = {"name": "cellgate", "display_name": "cellgate", "language": "python"}
    name = "runall/work.ipynb"
    lab.put_notebook(name, dict(nb))
    try:
        assert open_notebook(browser, lab, name)["name"] == "cellgate"
        (journal,) = wait_for(lambda: list((folder / "runs").glob("*.journal.jsonl")), 60,
                              "the audit journal in the folder's runs/ (its cellgate.toml)")
        menu_command(browser, "Run", "runmenu:run-all")
        shown = [str(n) for n in range(10)]
        wait_for(lambda: [cell_output(browser, n).strip() for n in range(10)] == shown, 180,
                 "every cell's output on the page", show=lambda: [cell_output(browser, n) for n in range(10)])
    finally:
        lab.shutdown_kernels()
    wait_for(lambda: events(journal)[-1:] == ["session-ended"], 60, "the record to end",
             show=lambda: events(journal)[-3:])

    (notebook,) = sorted((folder / "runs").glob("*.ipynb"))
    recorded = nbformat.read(notebook, as_version=4)
    cells = [(c.source, c.metadata.cellgate.get("status"), "".join(o.get("text", "") for o in c.outputs))
             for c in recorded.cells]
    assert cells == [(code, "ok", f"{n}\n") for n, code in enumerate(CELLS)]
    done = cellgate("verify", str(notebook), cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
