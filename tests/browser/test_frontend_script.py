"""Issue 22: no kernel output may run script in a frontend (SECURITY.md: the frontend as a target).

Real JupyterLab in headless Chromium. Each payload cell emits an output whose
script, if it runs, does what an attacker in the page would: writes a file
through the server's contents API with the page's XSRF cookie, opens a
terminal through ``/api/terminals`` and types a command into it that touches a
canary file on the host. The same cells run on the plain ``python3`` kernel
first: there they must succeed (the control that proves the test can fail);
on the ``cellgate`` kernel none may.
"""

from __future__ import annotations

import contextlib
import html
import json
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.remote.webdriver import WebDriver

from browser.lab import Lab, find, menu_command, open_notebook, output_texts, settled, wait_for

pytestmark = [pytest.mark.gvisor, pytest.mark.browser]

DONE = "payload-cells-done"
LINK_TEXT = "open-the-javascript-link"


def terminal(case: str) -> str:
    """The name the payload gives its terminal (the server's routes take word characters only)."""
    return "pwned_" + case.replace("-", "_")


def script(case: str, canary: Path) -> str:
    """What an attacker's script does from the page (or a same-origin frame in it). No double quotes, no %."""
    return (
        "(function(){var w=window.top;var m=w.document.cookie.match(/_xsrf=([^;]+)/);"
        "var h={'X-XSRFToken':m?m[1]:'','Content-Type':'application/json'};"
        f"w.fetch('/api/contents/pwned-{case}.txt',{{method:'PUT',headers:h,"
        "body:JSON.stringify({type:'file',format:'text',content:'pwned'})});"
        f"w.fetch('/api/terminals',{{method:'POST',headers:h,body:JSON.stringify({{name:'{terminal(case)}'}})}})"
        ".then(function(r){return r.json()}).then(function(t){"
        "var s=new w.WebSocket(w.location.origin.replace('http','ws')+'/terminals/websocket/'+t.name);"
        # Type once the shell has printed something (its prompt), as a person at the terminal would.
        "var typed=0;s.onmessage=function(e){if(!typed&&JSON.parse(e.data)[0]=='stdout'){typed=1;"
        f"s.send(JSON.stringify(['stdin','touch {canary / case}\\r']))}}}}}})}})()"
    )


def bundles(canary: Path) -> dict[str, dict[str, str]]:
    """One MIME bundle per payload of the issue, each as a kernel would send it."""
    def js(case: str) -> str:
        return script(case, canary)

    def attr(case: str) -> str:
        return html.escape(js(case), quote=True)

    frame = f"<script>{js('iframe-srcdoc')}</script>"

    def img(case: str) -> str:
        return f'<img src="missing-image.png" onerror="this.onerror=null;{attr(case)}">'

    return {
        "javascript-output": {"application/javascript": js("javascript-output")},
        "script-tag": {"text/html": f"<b>report</b><script>{js('script-tag')}</script>"},
        "img-onerror": {"text/html": img("img-onerror")},
        "markdown-html": {"text/markdown": f"# Summary\n\n{img('markdown-html')}"},
        # Inline SVG: JupyterLab shows an image/svg+xml output as an <img>, where script never runs.
        "svg-script": {"text/html": '<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20">'
                                    f'<script>{js("svg-script")}</script><circle r="5" cx="10" cy="10"/></svg>'},
        "javascript-link": {"text/html": f'<a href="javascript:{attr("javascript-link")}" target="_self">'
                                         f"{LINK_TEXT}</a>"},
        "iframe-srcdoc": {"text/html": f'<iframe srcdoc="{html.escape(frame)}"></iframe>'},
    }


def payload_notebook(canary: Path, kernel: str) -> dict[str, Any]:
    cells = [nbformat.v4.new_code_cell(f"display({json.dumps(bundle)}, raw=True)")
             for bundle in bundles(canary).values()]
    cells.append(nbformat.v4.new_code_cell(f"print({DONE!r})"))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    return dict(nb)


def read_every_output(browser: WebDriver) -> None:
    """Scroll each output into view, as a person reading the notebook would."""
    for output in find(browser, ".jp-OutputArea-output"):
        with contextlib.suppress(WebDriverException):  # an output re-rendered since find() is stale
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", output)


def files(root: Path) -> set[str]:
    """Every path under the server's root, but JupyterLab's own checkpoints."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".ipynb_checkpoints" not in p.parts}


def effects(lab: Lab, canary: Path) -> dict[str, list[str]]:
    """For each payload, which of its effects happened: a file written through the API, a terminal, a host file."""
    terminals = set(lab.terminals())
    return {case: [what for what, happened in (("contents", (lab.root / f"pwned-{case}.txt").exists()),
                                               ("terminal", terminal(case) in terminals),
                                               ("host", (canary / case).exists())) if happened]
            for case in bundles(canary)}


@pytest.mark.parametrize("kernel", ["python3", "cellgate"])
def test_payload_outputs_reach_the_server_only_from_the_plain_kernel(
        lab: Lab, browser: WebDriver, tmp_path: Path, kernel: str) -> None:
    canary = tmp_path / "host-canary"
    canary.mkdir()
    assert not any(effects(lab, canary).values()) and not lab.terminals()
    name = f"payloads-{kernel}.ipynb"
    lab.put_notebook(name, payload_notebook(canary, kernel))
    before = files(lab.root)
    try:
        assert open_notebook(browser, lab, name)["name"] == kernel
        started = time.monotonic()
        menu_command(browser, "Run", "runmenu:run-all")
        # Every cell ran and every output reached the page (inert or not): the last cell's print and the
        # harmless parts of the payloads are on screen.
        visible = (DONE, "report", "Summary", LINK_TEXT)
        wait_for(lambda: all(text in output_texts(browser) for text in visible), 180,
                 f"the cells of {name} to run and show {visible}", show=lambda: output_texts(browser))
        # A reader scrolls past every output: JupyterLab defers what is off screen (its windowing), and an
        # iframe it never laid out never loads (under CI's load the control's iframe stayed unloaded).
        read_every_output(browser)
        # The javascript: link needs a click, as a user reading the output would give it.
        for link in find(browser, ".jp-OutputArea-output a"):
            if link.text.strip() == LINK_TEXT:
                link.click()
        everything = {case: ["contents", "terminal", "host"] for case in bundles(canary)}
        if kernel == "python3":
            # The reader goes on scrolling while waiting: under CI's load one output was laid out only after
            # the first pass, and its script never ran (the svg case, once in ~20 runs).
            wait_for(lambda: read_every_output(browser) or effects(lab, canary) == everything, 60,
                     "every payload's script to run on the plain kernel (the control)",
                     show=lambda: effects(lab, canary))
        else:
            # Every output has rendered (the last cell's is on screen); a script acts within a second or two
            # of rendering (the control's whole chain takes about that): watch until nothing changes for 5s.
            seen = settled(lambda: effects(lab, canary), quiet=5, seconds=60)
            ran = {case: what for case, what in seen.items() if what}
            assert not ran, f"payload scripts ran in JupyterLab from the cellgate kernel's outputs: {ran}"
            assert files(lab.root) - before <= {name}, "files appeared in the server's root"
        print(f"{kernel}: payload cells ran and were checked in {time.monotonic() - started:.1f}s")
    finally:
        with contextlib.suppress(AssertionError):  # a failing run's stragglers land before the next test starts
            settled(lambda: (effects(lab, canary), lab.terminals()), quiet=2, seconds=30)
        lab.shutdown_terminals()
        lab.shutdown_kernels()
        for path in [*lab.root.glob("pwned-*.txt"), *canary.iterdir()]:
            path.unlink()
