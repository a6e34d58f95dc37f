"""The frontend as a target (W1-W5): no kernel output may run script in a frontend.

A real ``jupyter_client`` frontend (the ``cellgate`` kernelspec installed as
``cellgate install --prefix`` does) runs a cell that emits a catalogue of
active-content payloads, a widget comm and a message it signs itself with the
kernel's own key. Everything the frontend receives is checked with an HTML5
parser independent of the sanitizer (html5lib, which parses foreign SVG/MathML
content as browsers do).
"""

from __future__ import annotations

import base64
import html
import json
import re
import time
from pathlib import Path
from typing import Any

import html5lib
import nbformat
import pytest
from conftest import cellgate
from jupyter_client import KernelManager
from jupyter_client.session import Session

from cellgate.extensions.anthropic.view import cell_view
from cellgate.extensions.mcp.serve import cell_text
from cellgate.gate._errors import ConfigError
from cellgate.gate.config import load_settings

SAFE_TYPES = {"text/plain", "text/html", "text/latex", "application/json", "image/png", "image/jpeg", "image/gif",
              "image/webp"}
BAD_ELEMENTS = {"script", "iframe", "object", "embed", "base", "meta", "form", "link", "style", "frame", "frameset",
                "applet", "svg", "math", "template", "input", "button", "textarea", "portal", "noscript"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "background", "poster", "data", "cite",
                  "srcset", "longdesc", "lowsrc", "dynsrc", "ping"}
TEX_ACTIVE = re.compile(r"\\(href|url|class|cssId|style|data|require|unicode|toggle|mathtip|texttip|tip|html[A-Za-z]*|bbox"
                        r"|enclose|mmlToken)"
                        r"(?![A-Za-z])")

PAYLOADS_HTML = [
    "<script>document.title='pwned'</script>",
    "<img src=x onerror=\"fetch('/api/terminals',{method:'POST'})\">",
    "<a href=\"javascript:alert(1)\">click</a>",
    "<a href=\"jav&#x61;script:alert(1)\">entity</a><a href=\"&#106;avascript:alert(1)\">dec</a>",
    "<a href=\"  JaVaScRiPt:alert(1)\">case</a><a href=\"vbscript:msgbox(1)\">vb</a>",
    "<iframe srcdoc=\"<script>parent.alert(1)</script>\"></iframe>",
    "<object data=\"javascript:alert(1)\"></object><embed src=\"javascript:alert(1)\">",
    "<meta http-equiv=\"refresh\" content=\"0;url=javascript:alert(1)\">",
    "<base href=\"https://attacker.invalid/\">",
    "<form action=\"/api/contents\" method=\"post\"><input name=x><button formaction=\"javascript:alert(1)\">go</button></form>",
    "<style>@import url('https://attacker.invalid/x.css'); body{display:none}</style>",
    "<link rel=\"stylesheet\" href=\"https://attacker.invalid/x.css\">",
    "<div style=\"background:url(javascript:alert(1))\" onclick=\"alert(1)\">styled</div>",
    "<svg><script>alert(1)</script><a xlink:href=\"javascript:alert(1)\"><text>x</text></a></svg>",
    "<svg onload=\"alert(1)\"><animate onbegin=\"alert(1)\" attributeName=x dur=1s></svg>",
    "<svg><style><img src=x onerror=alert(1)></style></svg>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\">",
    "<img src=\"https://attacker.invalid/beacon.png\"><img src=\"data:text/html;base64,PHNjcmlwdD4=\">",
    "<p>math: $\\href{javascript:alert(1)}{click}$ and $\\style{position:fixed}{x}$ $\\bbox[background:url(x)]{y}$</p>",
    "<details open ontoggle=alert(1)><summary>t</summary></details>",
]
SVG_ACTIVE = ('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script>'
              '<foreignObject><iframe src="javascript:alert(3)"></iframe></foreignObject></svg>')
MARKDOWN = ("# title <img src=x onerror=alert(1)>\n\n<script>alert(1)</script>\n\n[link](javascript:alert(1)) "
            "<a href=\"javascript:alert(1)\">raw</a> ![i](https://attacker.invalid/p.png) `code <b>`\n\n"
            "$\\href{javascript:alert(1)}{m}$\n")

CELL = f"""
from IPython.display import display, Javascript, HTML, Markdown, Latex
import comm
display(Javascript("document.title = 'pwned-js'"))
for payload in {PAYLOADS_HTML!r}:
    display(HTML(payload))
display(Markdown({MARKDOWN!r}))
display({{"image/svg+xml": {SVG_ACTIVE!r}, "text/plain": "svg"}}, raw=True)
display(Latex(r"$\\href{{javascript:alert(1)}}{{x}}$ $\\require{{action}}\\toggle{{a}}{{b}}\\endtoggle$"))
display({{"application/javascript": "alert(1)", "text/html": "<script>alert(1)</script>ok",
          "application/vnd.jupyter.widget-view+json": {{"model_id": "m", "version_major": 2}},
          "text/vnd.custom+html": "<script>alert(1)</script>", "image/png": "not base64 \\"><script>",
          "text/plain": "raw bundle"}}, raw=True)
class Evil:
    def _repr_html_(self):
        return "<img src=x onerror=alert('repr')>"
display(Evil())
handle = display(HTML("<b>harmless at first</b>"), display_id=True)
handle.update(HTML("<img src=x onerror=alert('update')><script>alert('update')</script>"))
widget = comm.create_comm(target_name="jupyter.widget", data={{"state": {{"_model_name": "HTMLModel",
                          "value": "<script>alert(1)</script>"}}}})
widget.send({{"method": "update", "state": {{"value": "<img src=x onerror=alert(1)>"}}}})
kernel = get_ipython().kernel
kernel.session.send(kernel.iopub_socket, "display_data",
                    {{"data": {{"text/html": "<script>alert('hand-made')</script>",
                               "application/javascript": "alert('hand-made')",
                               "text/plain": "hand-made"}}, "metadata": {{}}, "transient": {{}}}},
                    parent=kernel.get_parent(), ident=b"kernel.hand-made")
get_ipython().payload_manager.write_payload({{"source": "page", "start": 0,
    "data": {{"text/html": "<img src=x onerror=alert('pager')>", "text/plain": "pager"}}}})
print("KERNEL-KEY", kernel.session.key.decode())
Evil()
"""


def script_capable(text: str) -> list[str]:
    """What in an HTML string could run script or reach the network in a browser (empty when inert)."""
    problems = []
    if "@import" in text.lower():
        problems.append("css @import")
    for match in TEX_ACTIVE.finditer(html.unescape(text)):
        problems.append(f"MathJax command \\{match.group(1)}")
    tree = html5lib.parseFragment(text, treebuilder="etree", namespaceHTMLElements=False)
    for element in tree.iter():
        if not isinstance(element.tag, str):
            continue
        tag = element.tag.rsplit("}", 1)[-1].lower()
        if tag in BAD_ELEMENTS or "}" in element.tag:  # foreign (svg/math) content too
            problems.append(f"element <{tag}>")
        for name, value in element.attrib.items():
            name = (name[1] if isinstance(name, tuple) else name).rsplit("}", 1)[-1].lower()
            if name.startswith("on") or name in ("style", "srcdoc", "formaction", "http-equiv"):
                problems.append(f"attribute {name}={value[:60]!r} on <{tag}>")
            if name in URL_ATTRIBUTES:
                url = re.sub(r"[\x00-\x20]", "", html.unescape(value)).lower()
                if url.startswith(("javascript:", "vbscript:")):
                    problems.append(f"{name}={value[:60]!r}")
                if url.startswith("data:") and not (tag == "img" and name == "src" and url.startswith("data:image/")):
                    problems.append(f"data url {name}={value[:60]!r} on <{tag}>")
                if tag == "img" and name == "src" and not url.startswith("data:image/"):
                    problems.append(f"remote image {value[:60]!r}")
    return problems


def bundle_problems(data: Any, where: str) -> list[str]:
    if not isinstance(data, dict):
        return [f"{where}: data is not an object"]
    problems = [f"{where}: MIME type {mime!r}" for mime in data if mime not in SAFE_TYPES]
    for mime in ("text/html", "text/latex"):
        value = data.get(mime)
        if isinstance(value, list):
            value = "".join(value)
        if isinstance(value, str):
            problems += [f"{where} {mime}: {p}" for p in script_capable(value)]
    for mime in ("image/png", "image/jpeg", "image/gif", "image/webp"):
        if mime in data:
            base64.b64decode(data[mime], validate=False)
            if not re.fullmatch(r"[A-Za-z0-9+/=\s]*", data[mime]):
                problems.append(f"{where} {mime}: not base64")
    return problems


def message_problems(msg: dict[str, Any]) -> list[str]:
    """Everything script-capable in a message a frontend received (every bundle it could render)."""
    kind = msg["header"]["msg_type"]
    content = msg["content"]
    if kind in ("comm_open", "comm_msg", "comm_close"):
        return [f"{kind} reached the frontend: {json.dumps(content)[:200]}"]
    problems = []
    if "data" in content:
        problems += bundle_problems(content["data"], kind)
    for payload in content.get("payload") or []:
        if "data" in payload:
            problems += bundle_problems(payload["data"], f"{kind} payload")
    return problems


def test_checker_finds_every_payload_unsanitized() -> None:
    """The control: the checker flags each raw payload, so a pass below means the relay removed it."""
    for payload in [*PAYLOADS_HTML, MARKDOWN.replace("\n", " ")]:
        assert script_capable(payload), payload
    assert bundle_problems({"image/svg+xml": SVG_ACTIVE}, "svg")
    assert bundle_problems({"application/javascript": "alert(1)"}, "js")


@pytest.fixture()
def frontend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> Any:
    done = cellgate("install", "--prefix", str(tmp_path / "prefix"), check=True)
    assert "installed kernelspec 'cellgate'" in done.stdout
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    config = tmp_path / "cellgate.toml"
    config.write_text('[audit]\ndir = "audit"\n' + getattr(request, "param", ""))
    monkeypatch.setenv("CELLGATE_CONFIG", str(config))
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        yield km, kc, tmp_path / "audit"
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=False)


def run_and_collect(kc: Any, code: str, timeout: float = 120) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The execute_reply and every IOPub message up to the idle of a sentinel cell run after it."""
    msg_id = kc.execute(code)
    sentinel = kc.execute("pass")
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))  # raises queue.Empty at the deadline
        messages.append(msg)
        if (msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
                and msg["parent_header"].get("msg_id") == sentinel):
            break
    reply = None
    while reply is None:
        candidate = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if candidate["parent_header"].get("msg_id") == msg_id:
            reply = candidate
    return reply, messages


def test_no_kernel_output_can_run_script_in_a_frontend(frontend: Any) -> None:
    km, kc, audit = frontend
    reply, messages = run_and_collect(kc, CELL)
    assert reply["content"]["status"] == "ok", reply["content"]

    # W1-W4: nothing the frontend received can run script; every payload still shows up, sanitized.
    problems = [p for msg in [*messages, reply] for p in message_problems(msg)]
    assert problems == [], "\n".join(problems)
    kinds = [m["msg_type"] for m in messages]
    assert not {"comm_open", "comm_msg", "comm_close"} & set(kinds), kinds  # W3: the widget never arrived
    displays = [m for m in messages if m["msg_type"] in ("display_data", "update_display_data", "execute_result")]
    assert len(displays) >= len(PAYLOADS_HTML) + 9
    unmarked = [m["content"]["data"] for m in displays if not m["content"]["metadata"].get("cellgate")]
    assert unmarked == [{"text/html": "<b>harmless at first</b>", "text/plain": "<IPython.core.display.HTML object>"}]
    js = next(m for m in displays if "Javascript object" in m["content"]["data"]["text/plain"])
    assert "pwned-js" not in json.dumps(js["content"])
    assert "[cellgate removed output of type application/javascript" in js["content"]["data"]["text/plain"]
    update = next(m for m in messages if m["msg_type"] == "update_display_data")
    assert "onerror" not in update["content"]["data"]["text/html"] and update["content"]["transient"]["display_id"]
    markdown = next(m for m in displays if "title" in str(m["content"]["data"].get("text/html", "")))
    assert "<h1>title" in markdown["content"]["data"]["text/html"]  # rendered, not dropped
    svg = next(m for m in displays if m["content"]["data"].get("text/plain") == "svg")
    assert svg["content"]["data"]["text/html"].startswith('<img src="data:image/svg+xml;base64,')
    hand_made = [m for m in displays if "hand-made" in json.dumps(m["content"])]
    assert hand_made and all("<script>" not in json.dumps(m["content"]) for m in hand_made)
    pager = reply["content"]["payload"][0]["data"]
    assert "onerror" not in pager["text/html"]

    # W5: the kernel's key is its own; the frontend rejects what the kernel signs with it.
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    kernel_key = re.search(r"KERNEL-KEY (\S+)", printed).group(1)
    front_key = km.get_connection_info()["key"]
    front_key = front_key.decode() if isinstance(front_key, bytes) else front_key
    assert len(kernel_key) >= 32 and kernel_key != front_key
    kernel_session = Session(key=kernel_key.encode(), signature_scheme="hmac-sha256")
    frames = kernel_session.serialize(kernel_session.msg("display_data", {"data": {"text/html": "<script>1</script>"},
                                                                          "metadata": {}}))
    front_session = Session(key=front_key.encode(), signature_scheme="hmac-sha256")
    with pytest.raises(ValueError, match="Invalid Signature"):
        front_session.deserialize(front_session.feed_identities(frames)[1])

    # Frontends still work as before: text and a clean image arrive.
    reply, messages = run_and_collect(kc, "print('still here')\nfrom IPython.display import HTML\nHTML('<b>bold</b>')")
    assert reply["content"]["status"] == "ok"
    assert any(m["msg_type"] == "stream" and m["content"]["text"] == "still here\n" for m in messages)
    result = next(m for m in messages if m["msg_type"] == "execute_result")
    assert result["content"]["data"]["text/html"] == "<b>bold</b>"

    kc.stop_channels()
    km.shutdown_kernel(now=False)
    (notebook,) = sorted(audit.glob("*.ipynb"))
    check_record(notebook)


def check_record(notebook: Path) -> None:
    """The notebook shows the sanitized outputs, marked; the journal keeps what the kernel sent; verify passes."""
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.cellgate.frontend == {"outputs": "sanitized", "trusted_mime": [], "allow_comms": False}
    cell = next(c for c in nb.cells if "KERNEL-KEY" in c.source)
    problems = []
    for output in cell.outputs:
        if "data" in output:
            problems += bundle_problems({k: v for k, v in output["data"].items()}, "notebook")
    assert problems == [], "\n".join(problems)
    marked = [o for o in cell.outputs if o.get("metadata", {}).get("cellgate", {}).get("sanitized")]
    assert len(marked) >= len(PAYLOADS_HTML)
    removed = {n["mime"] for o in marked for n in o.metadata.cellgate.sanitized if n["action"].startswith("removed")}
    assert {"application/javascript", "application/vnd.jupyter.widget-view+json", "text/vnd.custom+html"} <= removed

    journal = notebook.with_name(notebook.stem + ".journal.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in journal.splitlines()]
    raw = [r["output"] for r in records if r["event"] == "output"]
    raw_text = json.dumps(raw)
    for payload in ("document.title = 'pwned-js'", "<script>alert('hand-made')</script>", "onerror=alert('repr')",
                    "\\\\href{javascript:alert(1)}"):
        assert payload in raw_text, payload
    assert any("application/javascript" in o.get("data", {}) for o in raw)
    assert "comm-blocked" in [r["event"] for r in records]

    done = cellgate("verify", str(notebook))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("frontend", ['[frontend]\ntrusted_mime = ["text/html"]\nallow_comms = true\n'],
                         indirect=True)
def test_trusted_mime_and_comms_pass_only_when_the_operator_says_so(frontend: Any) -> None:
    km, kc, audit = frontend
    code = ("from IPython.display import HTML, Javascript, display\nimport comm\n"
            "display(HTML('<b onclick=\"x()\">trusted</b>'))\ndisplay(Javascript('x()'))\n"
            "c = comm.create_comm(target_name='jupyter.widget', data={'state': {}})")
    reply, messages = run_and_collect(kc, code)
    assert reply["content"]["status"] == "ok"
    displays = [m["content"] for m in messages if m["msg_type"] == "display_data"]
    assert displays[0]["data"]["text/html"] == '<b onclick="x()">trusted</b>'  # as the kernel sent it
    assert "application/javascript" not in displays[1]["data"]  # only the named type is trusted
    assert any(m["msg_type"] == "comm_open" and m["content"]["target_name"] == "jupyter.widget" for m in messages)
    kc.stop_channels()
    km.shutdown_kernel(now=False)
    (notebook,) = sorted(audit.glob("*.ipynb"))
    nb = nbformat.read(notebook, as_version=4)
    assert nb.metadata.cellgate.frontend == {"outputs": "sanitized", "trusted_mime": ["text/html"], "allow_comms": True}
    assert nb.cells[0].outputs[0]["data"]["text/html"] == '<b onclick="x()">trusted</b>'
    done = cellgate("verify", str(notebook))
    assert done.returncode == 0, done.stdout + done.stderr


def test_session_results_and_the_models_views_are_sanitized(session_factory: Any) -> None:
    box = session_factory()
    result = box.execute("from IPython.display import HTML, Javascript, display\n"
                         "display(Javascript('alert(1)'))\nHTML('<img src=x onerror=alert(1)>ok')")
    assert result.status == "ok"
    assert all(bundle_problems(o["data"], "result") == [] for o in result.outputs if "data" in o)
    assert result.outputs[1]["data"]["text/html"] == "<img>ok"
    assert "[cellgate removed output of type application/javascript" in result.text
    assert "[cellgate removed output of type application/javascript" in cell_view(result, "nb", 10_000, 1000)[0]["text"]
    assert "alert" not in cell_text(result)


def test_trusted_mime_must_name_a_mime_type(tmp_path: Path) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text('[frontend]\ntrusted_mime = ["html"]\n')
    with pytest.raises(ConfigError, match=r"frontend.trusted_mime.* 'html' is not a MIME type"):
        load_settings(config)
    config.write_text('[frontend]\nallow_widgets = true\n')
    with pytest.raises(ConfigError, match="unknown key 'frontend.allow_widgets'"):
        load_settings(config)


def test_what_nbclient_writes_to_disk_is_sanitized(frontend: Any, tmp_path: Path) -> None:
    from nbclient import NotebookClient

    km, kc, _ = frontend
    kc.stop_channels()
    km.shutdown_kernel(now=False)  # nbclient starts its own kernel from the same kernelspec
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from IPython.display import HTML, Javascript, Markdown, display\n"
        "display(Javascript('alert(1)'))\ndisplay(Markdown('<img src=x onerror=alert(1)> *md*'))\n"
        "HTML('<script>alert(1)</script><iframe srcdoc=x></iframe>shown')")]
    NotebookClient(nb, kernel_name="cellgate", timeout=120, startup_timeout=60).execute()
    written = tmp_path / "executed.ipynb"
    nbformat.write(nb, written)
    outputs = nbformat.read(written, as_version=4).cells[0].outputs
    assert [bundle_problems(o["data"], "nbclient") for o in outputs] == [[], [], []]
    assert outputs[1]["data"]["text/html"].strip() == "<p><img> <em>md</em></p>"
    assert outputs[2]["data"]["text/html"] == "shown"
