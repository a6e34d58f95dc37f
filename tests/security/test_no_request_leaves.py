"""Issue 28 on the protocol: what nbclient writes to disk from a cellgate kernel, the audit notebooks of that
kernel and of a ``cellgate run``, and what ``cellgate report`` renders of them hold no way out for a browser.

The payloads are the browser test's (``tests/exfil_payloads.py``): MathJax commands that load an image, whole or
split by what MathJax reads as nothing (``<wbr>``, comments), in ``text/html``, ``text/markdown`` and
``text/latex``; a remote image, a raw ``<img>`` and the same TeX in the model's turn and in the task. Checked as
MathJax reads text (``mathjax_reads``) and with an HTML5 parser independent of the sanitizer (``script_capable``).
"""

from __future__ import annotations

import json
import os
import re
from html import unescape
from pathlib import Path
from typing import Any

import html5lib
import nbformat
import pytest
from conftest import cellgate
from exfil_payloads import active_tex, agent_record, kernel_bundles, model_text
from markdown_it import MarkdownIt
from nbclient import NotebookClient
from test_frontend_outputs import script_capable

from cellgate.gate.review.report import CSP

pytestmark = pytest.mark.gvisor

URL = "http://127.0.0.1:9"  # never contacted here: the tests read what a browser would be given
CASES = kernel_bundles(URL)


def leaks(html: str) -> list[str]:
    """What in ``html`` would make a browser (with MathJax) send a request, or run script."""
    return [*script_capable(html), *(f"MathJax {c}" for c in active_tex(html))]


def output_leaks(outputs: list[dict[str, Any]]) -> list[str]:
    found = []
    for output in outputs:
        for mime, value in (output.get("data") or {}).items():
            text = value if isinstance(value, str) else "".join(value)
            if mime in ("text/html", "text/latex", "text/markdown"):
                found += [f"{mime}: {problem}" for problem in leaks(text)]
                if mime != "text/latex" and re.search(r"<wbr|<!--", text, re.IGNORECASE):
                    found.append(f"{mime}: keeps what MathJax reads as nothing: {text[:120]!r}")
    return found


@pytest.fixture()
def kernelspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    done = cellgate("install", "--prefix", str(tmp_path / "prefix"))
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[audit]\ndir = "{tmp_path / "runs"}"\n')
    monkeypatch.setenv("CELLGATE_CONFIG", str(config))
    return tmp_path / "runs"


def report_leaks(notebook: Path, cwd: Path) -> list[str]:
    output = cwd / f"{notebook.stem}.html"
    done = cellgate("report", str(notebook), "-o", str(output), cwd=cwd,
                    env={k: v for k, v in os.environ.items() if k != "CELLGATE_CONFIG"})
    assert done.returncode == 0, done.stderr
    page = output.read_text()
    tree = html5lib.parse(page, treebuilder="etree", namespaceHTMLElements=False)
    [csp] = [m.get("content") for m in tree.iter("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert csp == CSP and "img-src data:;" in csp and "default-src 'none'" in csp
    # No script on the page, so no MathJax: what remains is what loads without one (the cells' sources, shown as
    # code, hold the payloads as text).
    found = [f"<{e.tag}>" for e in tree.iter() if e.tag in ("script", "link", "iframe", "object", "embed")]
    for element in tree.iter():
        for name, value in element.attrib.items():
            if name in ("src", "srcset", "poster", "background", "data") and not value.startswith("data:"):
                found.append(f"<{element.tag} {name}={value[:80]!r}>")
    return found


def test_kernel_outputs_on_disk_and_in_the_report_hold_no_way_out(
        runsc: object, kernelspec: Path, tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"display({json.dumps(b)}, raw=True)")
                                         for b in CASES.values()])
    NotebookClient(nb, kernel_name="cellgate", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    written = tmp_path / "executed.ipynb"
    nbformat.write(nb, written)  # what nbclient's user keeps, read back from disk
    on_disk = nbformat.read(written, as_version=4)
    assert [len(c.outputs) for c in on_disk.cells] == [1] * len(CASES)
    problems = {case: output_leaks(cell.outputs) for case, cell in zip(CASES, on_disk.cells)}
    assert not any(problems.values()), problems
    for cell in on_disk.cells:  # the math is still there, defused where it was active, and says so
        assert "(mmlToken removed)" in json.dumps(cell.outputs[0]["data"])

    [audit] = kernelspec.glob("*.ipynb")
    recorded = nbformat.read(audit, as_version=4)
    problems = {case: output_leaks(cell.outputs) for case, cell in zip(CASES, recorded.cells)}
    assert not any(problems.values()), problems
    assert report_leaks(audit, tmp_path) == []


def markdown_renders(source: str) -> str:
    """What a CommonMark markdown renderer (as JupyterLab's and nbconvert's are) makes of a markdown cell."""
    return MarkdownIt("commonmark", {"html": True}).render(source)


def test_the_models_text_and_the_task_in_the_record_and_the_report_hold_no_way_out(
        runsc: object, tmp_path: Path) -> None:
    notebook = tmp_path / "agent.ipynb"
    agent_record(notebook, URL)
    recorded = nbformat.read(notebook, as_version=4)
    [task, turn] = recorded.cells
    for cell, who in ((task, "task"), (turn, "turn")):
        assert cell.cell_type == "markdown"
        rendered = markdown_renders(cell.source)
        assert leaks(rendered) == [], (who, rendered)
        assert URL not in re.sub(r"\$[^$]*\$", "", unescape(rendered)), rendered  # a URL only in defused TeX
        assert "[cellgate removed from this text: the src of an img" in rendered
        assert "the TeX command mmlToken" in rendered and "(mmlToken removed)" in rendered
        assert set(cell.metadata.cellgate["sanitized"]) >= {"the src of an img", "the TeX command mmlToken"}
    # The unsanitized text a frontend would have rendered does leak (the check can fail).
    assert leaks(markdown_renders(model_text(URL, "turn")))
    # The journal keeps what the model and the operator wrote, as data.
    records = [json.loads(line) for line in notebook.with_suffix(".journal.jsonl").read_text().splitlines()]
    assert [r["text"] for r in records if r["event"] == "model-turn"] == [model_text(URL, "turn")]
    assert [r["task"] for r in records if r["event"] == "agent-started"] == [model_text(URL, "task")]
    done = cellgate("verify", str(notebook), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert report_leaks(notebook, tmp_path) == []
