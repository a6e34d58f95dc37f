"""Issue 29 item 10: a live cellgate notebook in JupyterLab shows the way to its audit notebook.

Real JupyterLab, real headless Chromium, a real cellgate kernel in gVisor. The run panel of a notebook whose
kernel is cellgate's names the audit notebook that kernel records to (the server knows it from the launcher's
host-side state, never from the kernel), links it when it is under the server's root and opens it as a record
on a click; a run still going reads "still running", in the live notebook's panel and in the record's, never a
red FAILED; once the kernel is shut down the same record verifies. An audit notebook outside the root is shown
as its path, with no link.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import SAMPLE_TOOLS
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, cell_output, find, open_notebook, wait_for
from browser.test_lab_extension import lab_with_extension, side_tab

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]
__all__ = ["lab_with_extension"]  # the fixture, shared with test_lab_extension.py

LIVE = """[tools]
modules = ["tools.py"]

[audit]
dir = "runs"

[policy]
default = "deny"

[policy.tools.add]
decision = "allow"
"""
AUDIT_LINK = '.cg-run-facts dd[data-fact="audit notebook"]'
RUN_STATE = '.cg-run-facts dd[data-fact="run"]'


def cellgate_notebook(lab: Lab, name: str, source: str) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "cellgate", "display_name": "cellgate", "language": "python"}
    lab.put_notebook(name, dict(nb))


def texts(driver: WebDriver, css: str) -> list[str]:
    """The text of each element ``css`` finds ([] while the panel is re-rendered under us)."""
    try:
        return [e.text for e in find(driver, css)]
    except WebDriverException:
        return []


def click(driver: WebDriver, css: str, what: str) -> None:
    """Click the element ``css`` finds, looking again if the panel re-rendered it meanwhile."""
    def clicked() -> bool:
        try:
            find(driver, css)[0].click()
            return True
        except (IndexError, WebDriverException):
            return False

    wait_for(clicked, 30, what)


def panel_text(driver: WebDriver) -> str:
    return "\n".join(texts(driver, "#cellgate-run-panel"))


def verdicts(driver: WebDriver) -> dict[str, str]:
    """The run panel's verdict by its state class (``cg-verdict-live``, ``-ok``, ``-failed``, ``-error``)."""
    shown = {}
    try:
        for element in find(driver, "#cellgate-run-panel .cg-verdict"):
            classes = (element.get_attribute("class") or "").split()
            state = next((c.removeprefix("cg-verdict-") for c in classes if c.startswith("cg-verdict-")), "")
            if state and state != "running" and element.text:
                shown[state] = element.text
    except WebDriverException:  # re-rendered under us: the next poll looks again
        return {}
    return shown


def test_a_live_cellgate_notebook_links_its_audit_notebook_which_reads_still_running(
        lab_with_extension: Lab, browser: WebDriver) -> None:
    lab = lab_with_extension
    folder = lab.root / "live"
    folder.mkdir()
    (folder / "cellgate.toml").write_text(LIVE)
    shutil.copy(SAMPLE_TOOLS, folder / "tools.py")
    name = "live/work.ipynb"
    cellgate_notebook(lab, name, "print(tools.add(40, 2))")
    try:
        assert open_notebook(browser, lab, name)["name"] == "cellgate"
        (audit,) = wait_for(lambda: list((folder / "runs").glob("*.ipynb")), 60, "the kernel's audit notebook")
        relative = audit.relative_to(lab.root).as_posix()
        side_tab(browser, "cellgate-run-panel")
        wait_for(lambda: find(browser, f"{AUDIT_LINK} a.cg-audit-link"), 60, "the audit notebook's link",
                 show=lambda: panel_text(browser))
        assert texts(browser, "#cellgate-run-panel .cg-panel-heading") == [f"{name}: a live cellgate kernel"]
        (link,) = find(browser, f"{AUDIT_LINK} a.cg-audit-link")
        assert link.text == relative, link.text
        assert link.get_attribute("title") == f"open {audit} as a record", link.get_attribute("title")
        assert texts(browser, RUN_STATE) == ["still running"]

        # A cell runs: the record so far verifies, and the panel says the run is going, not that it failed.
        find(browser, ".jp-NotebookPanel .jp-Cell")[0].click()
        wait_for(lambda: find(browser, '.jp-NotebookPanel-toolbar [data-command="notebook:run-cell-and-select-next"]'),
                 30, "the toolbar's run button")[0].click()
        wait_for(lambda: "42" in cell_output(browser, 0), 120, "the cell's output", show=lambda: cell_output(browser, 0))
        verdict = wait_for(lambda: verdicts(browser).get("live"), 60, "the audit notebook's verdict",
                           show=lambda: verdicts(browser))
        assert verdict.startswith("the audit notebook: still running: the record so far matches its journal"), verdict
        assert "failed" not in verdicts(browser) and "FAILED" not in panel_text(browser)

        # The link opens the audit notebook itself, as a record: its own panel says "still running" too.
        click(browser, f"{AUDIT_LINK} a.cg-audit-link", "the audit notebook's link")
        wait_for(lambda: texts(browser, "#cellgate-run-panel .cg-panel-heading") == [relative], 60,
                 "the run panel to follow the opened record", show=lambda: panel_text(browser))
        assert find(browser, ".cg-audit-notebook .cg-record-note"), "the audit notebook did not open as a record"
        verdict = wait_for(lambda: verdicts(browser).get("live"), 60, "the record's verdict",
                           show=lambda: verdicts(browser))
        assert verdict.startswith("still running: the record so far matches its journal"), verdict
        assert "FAILED" not in panel_text(browser)
        assert lab.session_kernel(relative) is None, "opening the audit notebook started a kernel"
    finally:
        lab.shutdown_kernels()
    # The run has ended: the same record, verified again, passes (and "still running" is gone).
    click(browser, "#cellgate-run-panel .cg-verify", "verify again")
    verdict = wait_for(lambda: verdicts(browser).get("ok"), 60, "the ended run to verify",
                       show=lambda: verdicts(browser))
    assert verdict.startswith("verified: matches its journal"), verdict


def test_an_audit_notebook_outside_the_root_is_shown_as_its_path(lab_with_extension: Lab, browser: WebDriver) -> None:
    lab = lab_with_extension
    # The root's own cellgate.toml (conftest.py) records outside the root.
    audit_dir = Path(lab.root.parent / "audit")
    before = set(audit_dir.glob("*.ipynb")) if audit_dir.exists() else set()
    name = "outside-root.ipynb"
    cellgate_notebook(lab, name, "print('hello')")
    try:
        open_notebook(browser, lab, name)
        (audit,) = wait_for(lambda: list(set(audit_dir.glob("*.ipynb")) - before), 60, "the kernel's audit notebook")
        side_tab(browser, "cellgate-run-panel")
        # While the launcher is starting the panel says "not known yet" and asks again each second.
        wait_for(lambda: texts(browser, f"{AUDIT_LINK} .cg-audit-path") not in ([], ["not known yet"]), 60,
                 "the audit notebook's path", show=lambda: panel_text(browser))
        assert texts(browser, f"{AUDIT_LINK} .cg-audit-path") == [
            f"{audit} (outside the server's root: not opened here)"]
        assert not find(browser, f"{AUDIT_LINK} a"), "an audit notebook outside the root was linked"
        assert texts(browser, RUN_STATE) == ["still running"]
    finally:
        lab.shutdown_kernels()
