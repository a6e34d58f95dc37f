"""`cellgate report`: sandbox-made HTML, JavaScript and SVG are inert in a real browser,
and the page makes no request."""

from __future__ import annotations

import html.parser
import http.server
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import cellgate


class Attributes(html.parser.HTMLParser):
    """Every (tag, attribute, value) of a document."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [(tag, name, value) for name, value in attrs] or [(tag, "", None)]


class Beacon(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
        Beacon.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def beacon():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Beacon)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Beacon.hits = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def payloads(url: str) -> list[str]:
    return [
        "from IPython.display import HTML, display\n"
        f"display(HTML('<img src=x onerror=\"document.title=`PWNED-img`\"><img src=\"{url}/img\">"
        f"<style>@import url({url}/css);</style><link rel=stylesheet href=\"{url}/link\">"
        f"<a href=\"javascript:alert(1)\">click</a>'))",
        f"display({{'application/javascript': 'document.title=\"PWNED-js\"; fetch(\"{url}/js\")'}}, raw=True)",
        "display({'image/svg+xml': '<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"document.title=`PWNED-svg`\">"
        f"<image href=\"{url}/svg\"/></svg>'}}, raw=True)",
        "print('<script>document.title=\"PWNED-stream\"</script>')",
    ]


def dump_dom(chromium: str, tmp_path: Path, page: Path) -> str:
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120).stdout


def test_report_of_hostile_outputs_is_inert_in_chromium(session_factory, tmp_path: Path, beacon: str) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is needed for this test: run scripts/setup (apt-get install chromium)")
    box = session_factory()
    for code in payloads(beacon):
        assert box.execute(code).ok
    report = tmp_path / "run.html"
    done = cellgate("report", str(box.session.notebook_path), "-o", str(report), timeout=120)
    assert done.returncode == 0, done.stderr
    page = report.read_text()
    assert "Content-Security-Policy" in page and "<script" not in page.replace("&lt;script", "")
    # The control: the same browser, flags and beacon, on a page without the report's defences, does hit it.
    control = tmp_path / "control.html"
    control.write_text(f'<html><body><img src="{beacon}/control"></body></html>')
    dump_dom(chromium, tmp_path, control)
    assert Beacon.hits == ["/control"], Beacon.hits
    Beacon.hits.clear()
    dom = dump_dom(chromium, tmp_path, report)
    assert "<title>cellgate run " in dom, dom[:500]
    assert "PWNED" not in dom.split("</title>")[0]
    attributes = Attributes()
    attributes.feed(dom)
    assert not [a for a in attributes.found if a[1].startswith("on")], attributes.found
    assert not [a for a in attributes.found if a[1] in ("src", "href") and not str(a[2]).startswith(("data:", "#"))]
    assert "script" not in {a[0] for a in attributes.found}
    assert Beacon.hits == []
    # The printed payload is shown as text, not markup.
    assert "&lt;script&gt;document.title" in dom
