"""Issue 16: the calls of a run are visible in JupyterLab with no cellgate extension.

The Northwind audit notebook (313 calls in one cell) and a mixed run (every kind
of call, and a forged calls output from the kernel), both recorded in gVisor, are
opened in real JupyterLab in headless Chromium, which has no cellgate extension:
the host's table of calls is in the rendered page (the DOM JupyterLab built from
the notebook, after its own sanitizer), and the forgery shows as its note.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import NORTHWIND, cellgate
from security.calls_run import record_mixed_run
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, find, wait_for

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]


# What the page shows of the host's calls output: its text, and the cells of each table row.
SHOWN = """
const found = document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output .cellgate-calls');
const rows = (table) => table ? [...table.querySelectorAll('tbody tr')].map(
    (tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent.trim())) : [];
return [...found].map((div) => ({
    text: div.innerText,
    summary: rows(div.querySelector(':scope > .cellgate-calls-summary')),
    calls: rows(div.querySelector(':scope > .cellgate-calls-table')),
    hidden: rows(div.querySelector(':scope > details > .cellgate-calls-table')),
    open: div.querySelector(':scope > details')?.open ?? null,
    page: [...document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output')].map((o) => o.innerText)}));
"""


def as_reviewer_sees(driver: WebDriver, lab: Lab, name: str) -> dict[str, Any]:
    """Open ``name`` as a reviewer would; the host's calls output as the page rendered it."""
    driver.get(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")
    found = wait_for(lambda: driver.execute_script(SHOWN), 60, f"the calls table of {name} in the page",
                     show=lambda: [e.text[:200] for e in find(driver, ".jp-OutputArea-output")])
    assert len(found) == 1, found
    return dict(found[0])


def reviewed_copy(notebook: Path, lab: Lab) -> str:
    """The notebook in the server's root, naming the plain python3 kernel: JupyterLab starts the kernel a
    notebook names on opening it, and what it renders does not depend on that kernel (no sandbox needed)."""
    nb = json.loads(notebook.read_text())
    nb["metadata"]["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (lab.root / notebook.name).write_text(json.dumps(nb))
    return notebook.name


def test_the_calls_table_is_rendered_without_any_extension(lab: Lab, browser: WebDriver, tmp_path: Path) -> None:
    northwind = tmp_path / "northwind.ipynb"
    done = cellgate("exec", str(NORTHWIND / "late_orders.py"), "--tools", str(NORTHWIND / "tools.py"),
                    "--notebook", str(northwind), cwd=tmp_path,
                    env={k: v for k, v in os.environ.items() if k != "CELLGATE_CONFIG"})
    assert done.returncode == 0, done.stderr
    mixed = record_mixed_run(tmp_path)
    try:
        shown = as_reviewer_sees(browser, lab, reviewed_copy(northwind, lab))
        assert "cellgate recorded 313 gated calls of this cell: 313 allowed" in shown["text"]
        assert shown["summary"] == [["create_task", "allow", "allowed", "312"], ["list_orders", "allow", "allowed", "1"]]
        assert shown["calls"] == [] and not shown["open"]  # no call failed: no table of failures; <details> closed
        assert len(shown["hidden"]) == 313 and shown["hidden"][0][:2] == ["1", "list_orders"]  # in <details>

        shown = as_reviewer_sees(browser, lab, reviewed_copy(mixed, lab))
        rows = shown["calls"]
        assert [(r[1], r[5]) for r in rows] == [
            ("add", "allowed"), ("echo", "approved"), ("echo", "denied by approver"), ("big", "denied by rule"),
            ("add", "invalid arguments"), ("explode", "tool error"), ("slow", "timed out")], rows
        assert rows[4][3] == "invalid"  # a failed validation is not a deny
        assert rows[1][3].startswith("approved") and rows[1][4].startswith("scripted answered ")
        assert rows[2][3].startswith("approval-denied") and "rule tools.big.decision" in rows[3][3]
        assert '"two"' in rows[4][2] and "ValueError: boom" in rows[5][6] and "did not finish" in rows[6][6]
        page = "\n".join(shown["page"])
        assert "the kernel sent this output in cellgate's own name" in page
        assert "FORGED: every call was allowed" in page  # as the text the kernel sent, never as a table
    finally:
        browser.get("about:blank")  # no page left to start a kernel again for its notebook
        lab.shutdown_kernels()
