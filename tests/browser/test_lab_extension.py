"""Issue 16: cellgate's JupyterLab extension (``labextension/``) in real JupyterLab and headless Chromium.

A real audit notebook (``cellgate exec``: an allowed call, a call whose result is a blob, a tool error, a call
denied by policy, invalid arguments; then a failing cell) opens as a record: no kernel, read-only, a status
badge on each cell, the run panel with the run's hashes and the server-side ``cellgate verify``. The host's
calls output the record carries shows as the renderer's table: filtering, sorting, a blob loaded through the
server and hostile text shown as text are checked on the DOM; a copy whose host output was edited fails verify.
Then a live cellgate kernel's cell asks for approval (the queue approver), the pending-approvals panel shows it and approves it,
and the cell goes on: asserted on the page and in the journal.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import SAMPLE_TOOLS
from conftest import cellgate as run_cellgate
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from browser.lab import Lab, cell_output, find, open_notebook, settled, wait_for
from cellgate.gate.audit.journal import read_journal

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]

CALLS_MIME = "application/vnd.cellgate.calls+json"
HOSTILE = "<b>boom</b>"
PROGRAM = f"""print(tools.add(40, 2))
print(len(tools.big(8)))
for attempt in (lambda: tools.explode({HOSTILE!r}), lambda: tools.echo("not allowed"), lambda: tools.add("x")):
    try:
        attempt()
    except Exception as error:
        print(type(error).__name__)
"""
POLICY = """[policy]
default = "deny"

[policy.tools.add]
decision = "allow"

[policy.tools.big]
decision = "allow"

[policy.tools.explode]
decision = "allow"

[policy.tools.echo]
decision = "deny"
"""
APPROVING = """[tools]
modules = ["tools.py"]

[audit]
dir = "runs"

[policy]
default = "deny"
approver = "queue"
approval_timeout = 120

[policy.tools.echo]
decision = "approve"
"""


@pytest.fixture()
def lab_with_extension(lab: Lab) -> Iterator[Lab]:
    """The shared JupyterLab with cellgate's extension turned on for the pages this test loads (Lab reads
    ``page_config.json`` on each page load; the other browser tests see Lab without the extension)."""
    if importlib.util.find_spec("cellgate_jupyterlab") is None:
        raise AssertionError("cellgate_jupyterlab is not installed: run scripts/setup "
                             "(it runs `pip install ./labextension`)")
    page_config = lab.root.parent / "jupyter_config_dir" / "labconfig" / "page_config.json"
    shown = json.loads(page_config.read_text())
    page_config.write_text(json.dumps({**shown, "disabledExtensions": {"cellgate-jupyterlab": False}}))
    try:
        yield lab
    finally:
        page_config.write_text(json.dumps(shown))


def with_edited_calls_output(notebook: dict[str, Any]) -> dict[str, Any]:
    """The notebook with the text of each host-authored calls output edited, as a forger of the record would."""
    edited = copy.deepcopy(notebook)
    for cell in edited["cells"]:
        for output in cell.get("outputs", []):
            if CALLS_MIME in output.get("data", {}):
                output["data"]["text/plain"] = "every call was allowed"
    return edited


def refused(lab: Lab, method: str, path: str, body: Any = None) -> tuple[int, str]:
    """The status and message of a server extension call that must fail."""
    try:
        lab.api(method, path, body)
    except urllib.error.HTTPError as exc:
        return exc.code, str(json.loads(exc.read() or b"{}").get("message", ""))
    raise AssertionError(f"{method} {path} was answered")


def texts(driver: WebDriver, css: str) -> list[str]:
    return [e.text for e in find(driver, css)]


def side_tab(driver: WebDriver, panel_id: str) -> None:
    """Open a right-hand side panel by its tab, as a user would."""
    tab = wait_for(lambda: find(driver, f'.jp-SideBar .lm-TabBar-tab[data-id="{panel_id}"]'), 30,
                   f"the {panel_id} tab")[0]
    if "lm-mod-current" not in (tab.get_attribute("class") or ""):
        tab.click()
    wait_for(lambda: [p for p in find(driver, f"#{panel_id}") if p.is_displayed()], 30, f"the {panel_id} panel")


def open_record(driver: WebDriver, lab: Lab, name: str) -> None:
    driver.get(f"{lab.url}/lab/tree/{name}?reset&token={lab.token}")
    wait_for(lambda: find(driver, ".jp-NotebookPanel .jp-Cell"), 60, f"JupyterLab to show the cells of {name}")


def calls_rows(table: WebElement) -> list[str]:
    return [row.find_element(By.CSS_SELECTOR, ".cg-col-tool").text
            for row in table.find_elements(By.CSS_SELECTOR, "tr.cg-call")]


def test_an_audit_notebook_opens_as_a_record_with_its_calls_badges_and_run_panel(
        lab_with_extension: Lab, browser: WebDriver, tmp_path: Path) -> None:
    lab = lab_with_extension
    folder = lab.root / "review"
    folder.mkdir()
    (tmp_path / "cellgate.toml").write_text(POLICY)
    (tmp_path / "calls.py").write_text(PROGRAM)
    (tmp_path / "fails.py").write_text("raise RuntimeError('the second cell fails')\n")
    env = {k: v for k, v in os.environ.items() if k != "CELLGATE_CONFIG"}
    done = run_cellgate("exec", "calls.py", "fails.py", "--tools", str(SAMPLE_TOOLS),
                        "--notebook", str(folder / "run.ipynb"), cwd=tmp_path, env=env)
    assert done.returncode == 1 and "ended with status error" in done.stderr, done.stdout + done.stderr
    recorded = json.loads((folder / "run.ipynb").read_text())
    first = recorded["cells"][0]["metadata"]["cellgate"]
    assert [c["decision"] for c in first["calls"]] == ["allow", "allow", "allow", "deny", "invalid"], first["calls"]
    host_outputs = [o for o in recorded["cells"][0]["outputs"] if CALLS_MIME in o.get("data", {})]
    assert [o["metadata"] for o in host_outputs] == [{"cellgate": {"authored_by": "host"}}], host_outputs
    assert host_outputs[0]["data"][CALLS_MIME]["calls"] == first["calls"]
    (folder / "edited.ipynb").write_text(json.dumps(with_edited_calls_output(recorded)))

    # The server extension serves files under its root only, and blobs from a run's own blob folder only.
    blob = first["calls"][1]
    assert refused(lab, "GET", "/cellgate/verify?path=../jupyter-lab.log")[0] == 403
    sha, size = blob["result_sha256"], blob["result_bytes"]
    code, message = refused(lab, "GET", f"/cellgate/blob?path=review/other.blobs/{sha}.json&sha256={sha}&bytes={size}")
    assert code == 404 and "no run journal 'other.journal.jsonl'" in message, message
    code, message = refused(lab, "GET", f"/cellgate/blob?path=review/run.blobs/{sha}.json&sha256={sha}&bytes=1")
    assert code == 422 and "its recorded size" in message, message
    forged = "f" * 64
    (folder / "run.blobs" / f"{forged}.json").symlink_to("/etc/passwd")
    assert refused(lab, "GET", f"/cellgate/blob?path=review/run.blobs/{forged}.json&sha256={forged}&bytes=10")[0] == 422

    # The record itself: badges, no kernel, the run panel with the server's verify.
    open_record(browser, lab, "review/run.ipynb")
    assert wait_for(lambda: texts(browser, ".cg-badge") == ["ok", "error"] and texts(browser, ".cg-badge"), 30,
                    "a status badge on each cell", show=lambda: texts(browser, ".cg-badge"))
    assert find(browser, ".cg-audit-notebook .cg-record-note")
    side_tab(browser, "cellgate-run-panel")
    verdict = wait_for(lambda: [e.text for e in find(browser, ".cg-verdict-ok, .cg-verdict-failed, .cg-verdict-error")
                                if e.text], 60, "the run panel's verify result")[0]
    assert verdict.startswith("verified: matches its journal"), verdict
    facts = {e.get_attribute("data-fact"): e.text for e in find(browser, ".cg-run-facts dd")}
    meta = recorded["metadata"]["cellgate"]
    assert facts["session"] == meta["session_id"]
    assert facts["policy sha256"] == meta["policy"]["sha256"]
    assert facts["manifest sha256"] == meta["tools"]["manifest_sha256"]
    assert facts["cells"] == "2; 1 ok, 1 error"
    assert facts["calls"] == "5; 3 allow, 1 deny, 1 invalid", facts
    assert facts["outcomes"] == "2 ok, 1 denied, 1 failed, 1 invalid", facts
    assert settled(lambda: lab.session_kernel("review/run.ipynb"), quiet=3, seconds=30) is None, \
        "opening an audit notebook started a kernel"
    assert not find(browser, ".lm-TabBar-tab.jp-mod-dirty"), "opening the record changed it"

    # The host's calls output: the renderer's table, filtered, sorted, a blob loaded; hostile text stays text.
    (table,) = wait_for(lambda: find(browser, ".cg-rendered-calls"), 30, "the calls table under cell 1")
    assert calls_rows(table) == ["add", "big", "explode", "echo", "add"]
    summary = table.find_element(By.CSS_SELECTOR, ".cg-calls-summary").text
    assert summary == "5 calls: 3 allow, 1 deny, 1 invalid; outcomes: 2 ok, 1 denied, 1 failed, 1 invalid", summary
    table.find_element(By.CSS_SELECTOR, ".cg-calls-filter").send_keys("boom")
    wait_for(lambda: calls_rows(table) == ["explode"], 10, "the filter to keep the explode call",
             show=lambda: calls_rows(table))
    table.find_element(By.CSS_SELECTOR, "tr.cg-call .cg-expand").click()
    detail = wait_for(lambda: table.find_elements(By.CSS_SELECTOR, ".cg-call-detail"), 10, "the call's details")[0]
    assert f"error (failed)\ntool 'explode' failed: ValueError: {HOSTILE}" in detail.text, detail.text
    assert not table.find_elements(By.CSS_SELECTOR, ".cg-call-detail b"), "the error's markup was rendered"
    table.find_element(By.CSS_SELECTOR, ".cg-calls-filter").clear()
    browser.execute_script("arguments[0].dispatchEvent(new Event('input'))",
                           table.find_element(By.CSS_SELECTOR, ".cg-calls-filter"))
    Select(table.find_element(By.CSS_SELECTOR, ".cg-calls-facet")).select_by_value("invalid")
    wait_for(lambda: calls_rows(table) == ["add"], 10, "the decision filter", show=lambda: calls_rows(table))
    Select(table.find_element(By.CSS_SELECTOR, ".cg-calls-facet")).select_by_value("")
    table.find_element(By.CSS_SELECTOR, 'th[data-sort="tool"]').click()
    wait_for(lambda: calls_rows(table) == ["add", "add", "big", "echo", "explode"], 10, "sorting by tool",
             show=lambda: calls_rows(table))
    big = [row for row in table.find_elements(By.CSS_SELECTOR, "tr.cg-call")
           if row.find_element(By.CSS_SELECTOR, ".cg-col-tool").text == "big"][0]
    big.find_element(By.CSS_SELECTOR, ".cg-expand").click()
    wait_for(lambda: table.find_elements(By.CSS_SELECTOR, ".cg-load-blob"), 10, "the blob button")[0].click()
    loaded = wait_for(lambda: [e.text for e in table.find_elements(By.CSS_SELECTOR, ".cg-blob-loaded")], 30,
                      "the blob loaded through the server",
                      show=lambda: [e.text[:200] for e in table.find_elements(By.CSS_SELECTOR, ".cg-call-detail pre")])
    assert loaded[0] == json.dumps("x" * 8 * 1024), loaded[0][:100]
    assert lab.session_kernel("review/run.ipynb") is None
    # A copy with its host output edited is not what the journal says: the run panel's verify names the cell.
    open_record(browser, lab, "review/edited.ipynb")
    side_tab(browser, "cellgate-run-panel")
    verdict = wait_for(lambda: [e.text for e in find(browser, ".cg-verdict-failed")], 60, "verify to fail")[0]
    assert "cell 1 differs from the journal in its host-authored calls output, which was edited" in verdict, verdict
    assert lab.session_kernel("review/edited.ipynb") is None


def test_an_approval_is_answered_from_the_panel_and_the_cell_goes_on(
        lab_with_extension: Lab, browser: WebDriver) -> None:
    lab = lab_with_extension
    folder = lab.root / "approve"
    folder.mkdir()
    (folder / "cellgate.toml").write_text(APPROVING)
    shutil.copy(SAMPLE_TOOLS, folder / "tools.py")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "print('echoed', tools.echo('hello <i>reviewer</i>'))")])
    nb.metadata["kernelspec"] = {"name": "cellgate", "display_name": "cellgate", "language": "python"}
    name = "approve/work.ipynb"
    lab.put_notebook(name, dict(nb))
    try:
        assert open_notebook(browser, lab, name)["name"] == "cellgate"
        (journal,) = wait_for(lambda: list((folder / "runs").glob("*.journal.jsonl")), 60, "the run's journal")
        side_tab(browser, "cellgate-approvals-panel")
        find(browser, ".jp-NotebookPanel .jp-Cell")[0].click()
        wait_for(lambda: find(browser, '.jp-NotebookPanel-toolbar [data-command="notebook:run-cell-and-select-next"]'),
                 30, "the toolbar's run button")[0].click()
        (card,) = wait_for(lambda: find(browser, ".cg-approval"), 120, "the request in the approvals panel",
                           show=lambda: texts(browser, ".cg-approvals-panel"))
        assert card.find_element(By.CSS_SELECTOR, ".cg-approval-tool").text == "echo (call 1)"
        # The cell line is the kernel's claim: labelled as `cellgate approvals list` labels it (issue 28).
        where = card.find_element(By.CSS_SELECTOR, ".cg-approval-where").text
        assert where == "cell line 1 (reported by the kernel): print('echoed', tools.echo('hello <i>reviewer</i>'))", \
            where
        assert '"text": "hello <i>reviewer</i>"' in card.find_element(By.CSS_SELECTOR, ".cg-approval-args").text
        assert not card.find_elements(By.CSS_SELECTOR, "i"), "the arguments' markup was rendered"
        digest = card.find_element(By.CSS_SELECTOR, ".cg-approval-digest").text
        assert re.fullmatch(r"sha256 [0-9a-f]{64}", digest), digest
        assert "s left)" in card.find_element(By.CSS_SELECTOR, ".cg-approval-deadline").text
        assert "echoed" not in cell_output(browser, 0), "the cell went on before its call was approved"
        # An answer is bound to the digest shown: another digest is refused and the request stays pending.
        kernel = (lab.session_kernel(name) or {})["id"]
        code, message = refused(lab, "POST", f"/cellgate/approvals/{card.get_attribute('data-id')}",
                                {"decision": "allow", "args_sha256": "0" * 64, "kernel": kernel})
        assert code == 409 and "not the 0000000000000000… shown" in message, message
        assert [r["args_sha256"] for r in lab.api("GET", f"/cellgate/approvals?kernel={kernel}")["requests"]] == [
            digest.removeprefix("sha256 ")]
        card.find_element(By.CSS_SELECTOR, ".cg-approve").click()
        wait_for(lambda: "echoed hello <i>reviewer</i>" in cell_output(browser, 0), 60, "the cell to go on",
                 show=lambda: cell_output(browser, 0))
        wait_for(lambda: not find(browser, ".cg-approval"), 30, "the answered request to leave the panel")
    finally:
        lab.shutdown_kernels()
    records = wait_for(lambda: (lambda r: r if r[-1:] and r[-1]["event"] == "session-ended" else None)(
        read_journal(journal).records), 60, "the record to end")
    (finished,) = [r["call"] for r in records if r["event"] == "call-finished"]
    assert finished["decision"] == "approved" and finished["ok"], finished
    assert finished["approval"]["approver"].startswith("queue:uid "), finished["approval"]
    assert finished["args_sha256"] == digest.removeprefix("sha256 ")
