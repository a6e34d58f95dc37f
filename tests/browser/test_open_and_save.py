"""Issue 12: looking at a run must not break its verification.

A real audit notebook (``cellgate exec`` of a program with a gated call) is opened
in real JupyterLab in headless Chromium and saved with Ctrl+S, as a reviewer
would; JupyterLab rewrites the file (its own JSON layout and number formatting,
the kernel's ``language_info``). ``cellgate verify`` must still pass, and an edit
of one output character in the saved file must still fail.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SAMPLE_TOOLS
from conftest import cellgate as run_cellgate
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, find, open_notebook, output_texts, wait_for

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]

def cellgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cellgate(*args, cwd=cwd, env={k: v for k, v in os.environ.items() if k != "CELLGATE_CONFIG"})


def differences(old: Any, new: Any, where: str = "") -> Iterator[str]:
    """Where two JSON documents differ, as the reader of a report wants it (types count: 300.0 is not 300)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            if key not in new:
                yield f"{where}.{key}: removed"
            elif key not in old:
                yield f"{where}.{key}: added {json.dumps(new[key])[:80]}"
            else:
                yield from differences(old[key], new[key], f"{where}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new)):
            yield from differences(a, b, f"{where}[{index}]")
    elif type(old) is not type(new) or old != new:
        yield f"{where}: {json.dumps(old)[:60]} -> {json.dumps(new)[:60]}"


def test_a_notebook_opened_and_saved_in_jupyterlab_still_verifies(
        lab: Lab, browser: WebDriver, tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text("total = tools.add(40, 2)\nprint(f'total {total}', 2.50)\n")
    notebook = lab.root / "audit-run.ipynb"
    done = cellgate("exec", str(program), "--tools", str(SAMPLE_TOOLS), "--notebook", str(notebook), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = cellgate("verify", str(notebook), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    recorded = notebook.read_text()

    try:
        # As a reviewer would: open it (its kernel starts, language_info arrives), look, press Ctrl+S.
        assert open_notebook(browser, lab, notebook.name)["name"] == "cellgate"
        wait_for(lambda: "total 42" in output_texts(browser), 30, "the recorded output on screen")

        def save_with_kernel_info() -> str | None:
            # The page learns the kernel's language_info a moment after the server reports the kernel idle
            # (more so through the kernelspec's launcher): press Ctrl+S until a save carries it. The file is
            # read a poll after the press, never right after it: the server writes a save in place (after a
            # backup), so a read in the middle of one finds it cut short.
            text = notebook.read_text()
            try:
                saved_info = json.loads(text)["metadata"].get("language_info", {}) if text != recorded else {}
            except json.JSONDecodeError:
                return None  # a save being written: read it at the next poll
            if saved_info.get("version"):
                return text
            find(browser, ".jp-NotebookPanel .jp-Cell")[0].click()
            ActionChains(browser).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
            return None

        saved = wait_for(save_with_kernel_info, 60, "JupyterLab to save the notebook with the kernel's info", every=1)
    finally:
        lab.shutdown_kernels()
    changes = list(differences(json.loads(recorded), json.loads(saved)))
    print(f"JupyterLab's save rewrote the file; {len(changes)} JSON-level changes besides layout:\n"
          + "\n".join(changes[:12]))

    done = cellgate("verify", str(notebook), cwd=tmp_path)
    assert done.returncode == 0, f"verify failed after a JupyterLab open-and-save:\n{done.stdout}{done.stderr}"

    assert saved.count("total 42") == 1
    notebook.write_text(saved.replace("total 42", "total 43"))
    done = cellgate("verify", str(notebook), cwd=tmp_path)
    assert done.returncode == 1 and "cell 1 differs from the journal in its outputs" in done.stderr, done.stderr
