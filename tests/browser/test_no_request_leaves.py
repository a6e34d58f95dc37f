"""Issue 28: nothing leaves through a reviewer's browser, live or from the record.

Real JupyterLab in headless Chromium (the module's one server) and a loopback beacon that records every request.
Each payload (``tests/exfil_payloads.py``) names its case in the beacon's URL. A cell of the plain ``python3``
kernel, and a notebook written without cellgate, show the payloads unsanitized: those must hit the beacon (the
control that proves the test can fail). From a ``cellgate`` kernel cell, live and when its audit notebook is
opened, and from the record of a ``cellgate run`` whose task and model turn carry the payloads, none may.

Synchronised on the page: every payload's math is typeset (MathJax's ``mjx-container``) before the beacon is
watched, and a negative check watches until nothing changes for a few seconds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest
from exfil_payloads import (
    KERNEL_MIMES,
    SPLITS,
    Beacon,
    agent_record,
    beacon,
    kernel_bundles,
    model_cases,
    model_text,
)
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, find, menu_command, open_notebook, output_texts, settled, wait_for

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]

DONE = "exfil-cells-done"
KERNEL_CASES = [f"{kind}-{split}" for kind in KERNEL_MIMES for split in SPLITS]
# Unsanitized, JupyterLab's own renderers take these out: HTML as the kernel sent it, and a whole command in its
# markdown and LaTeX renderers. Its markdown renderer lifts math out before parsing and puts it back as escaped
# text, and its LaTeX renderer sets text, so a split command stays split there; through cellgate (which renders
# markdown to HTML itself) it would not be (before issue 28 it was, live and in the record).
PLAIN_KERNEL_HITS = ["html-comment", "html-wbr", "html-whole", "latex-whole", "markdown-whole"]
PLAIN_MODEL_HITS = sorted(case for who in ("task", "turn") for case in model_cases(who) if not case.endswith("wbr"))


def payload_notebook(bundles: dict[str, dict[str, str]], kernel: str) -> dict[str, Any]:
    """One cell displays every payload, then says it is done (one cell: the record of several cells queued at
    once by Run All is not what this test is about)."""
    source = "".join(f"display({json.dumps(bundle)}, raw=True)\n" for bundle in bundles.values())
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source + f"print({DONE!r})")])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    return dict(nb)


def typeset(driver: WebDriver) -> int:
    """How many math expressions MathJax has typeset in the open notebook."""
    return len(find(driver, ".jp-NotebookPanel mjx-container"))


def wait_typeset(driver: WebDriver, count: int, what: str) -> None:
    """Wait until ``count`` expressions are typeset, scrolling through the cells as a reader does: JupyterLab
    renders a cell of an opened notebook once it comes near the view."""
    polls = iter(range(1 << 30))

    def done() -> bool:
        cells = find(driver, ".jp-NotebookPanel .jp-Cell")
        if cells:
            driver.execute_script("arguments[0].scrollIntoView()", cells[next(polls) % len(cells)])
        return typeset(driver) >= count

    wait_for(done, 120, f"MathJax to typeset {count} expressions of {what}",
             show=lambda: (typeset(driver), output_texts(driver)[-800:]))


def nothing_reaches(server: Beacon, what: str) -> None:
    seen = settled(server.seen, quiet=4, seconds=60)
    assert seen == [], f"{what} made the reviewer's browser call the beacon for: {seen}"


def the_control_reaches(server: Beacon, expected: list[str], what: str) -> None:
    wait_for(lambda: server.seen() == expected, 60, f"{what} to call the beacon for {expected} (the control)",
             show=server.seen)


def recorded(audit: Path, before: set[Path]) -> Path | None:
    """The audit notebook the kernel started in the Lab writes (its cellgate.toml puts them in ``audit``), once
    it holds every payload's output."""
    for path in set(audit.rglob("*.ipynb")) - before:
        try:
            cells = nbformat.read(path, as_version=4).cells
        except (OSError, ValueError):  # replaced under us: the next poll reads it again
            continue
        if [len(c.outputs) for c in cells] == [len(KERNEL_CASES) + 1]:
            return path
    return None


@pytest.mark.parametrize("kernel", ["python3", "cellgate"])
def test_kernel_outputs_reach_the_beacon_only_from_the_plain_kernel(
        lab: Lab, browser: WebDriver, kernel: str) -> None:
    audit = lab.root.parent / "audit"
    before = set(audit.rglob("*.ipynb"))
    with beacon() as server:
        name = f"exfil-{kernel}.ipynb"
        lab.put_notebook(name, payload_notebook(kernel_bundles(server.url), kernel))
        try:
            assert open_notebook(browser, lab, name)["name"] == kernel
            menu_command(browser, "Run", "runmenu:run-all")
            wait_for(lambda: DONE in output_texts(browser), 180, f"the cells of {name} to run",
                     show=lambda: output_texts(browser)[-800:])
            wait_typeset(browser, len(KERNEL_CASES), name)
            if kernel == "python3":
                the_control_reaches(server, PLAIN_KERNEL_HITS, "the plain kernel's outputs")
                return
            nothing_reaches(server, "the cellgate kernel's live outputs")
            record = wait_for(lambda: recorded(audit, before), 120, "the audit notebook to hold every output",
                              show=lambda: [p.name for p in audit.rglob("*.ipynb")])
        finally:
            lab.shutdown_kernels()
        # The record of that session, opened as a reviewer opens it.
        shutil.copy(record, lab.root / "exfil-record.ipynb")
        try:
            open_notebook(browser, lab, "exfil-record.ipynb")
            wait_typeset(browser, len(KERNEL_CASES), "the audit notebook")
            nothing_reaches(server, "the cellgate kernel's audit notebook")
        finally:
            lab.shutdown_kernels()


def test_the_models_text_and_the_task_reach_the_beacon_only_when_written_unsanitized(
        lab: Lab, browser: WebDriver, tmp_path: Path) -> None:
    with beacon() as server:
        # As a notebook written without cellgate shows them (the cells as cellgate wrote them before issue 28).
        control = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell(f"**Task:** {model_text(server.url, 'task')}"),
            nbformat.v4.new_markdown_cell(model_text(server.url, "turn"))])
        control.metadata["kernelspec"] = {"name": "python3", "display_name": "python3", "language": "python"}
        lab.put_notebook("exfil-plain-turns.ipynb", dict(control))
        try:
            open_notebook(browser, lab, "exfil-plain-turns.ipynb")
            wait_typeset(browser, 4, "the hand-written markdown cells")
            the_control_reaches(server, PLAIN_MODEL_HITS, "markdown cells written without cellgate")
        finally:
            lab.shutdown_kernels()

    with beacon() as server:
        agent_record(lab.root / "exfil-agent.ipynb", server.url)
        cells = nbformat.read(lab.root / "exfil-agent.ipynb", as_version=4).cells
        assert [c.cell_type for c in cells] == ["markdown", "markdown"]
        try:
            open_notebook(browser, lab, "exfil-agent.ipynb")
            wait_typeset(browser, 4, "the agent run's audit notebook")  # the defused math is still math
            nothing_reaches(server, "the model's turn and the task in the record of `cellgate run`")
            shown = [e.text for e in find(browser, ".jp-MarkdownOutput")]
            assert len([t for t in shown if "cellgate removed from this text" in t]) == 2, shown
        finally:
            lab.shutdown_kernels()
