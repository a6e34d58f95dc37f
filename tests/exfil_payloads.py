"""Issue 28's ways out through a reviewer's browser, and a loopback beacon that counts who took them.

Each payload carries its case name in the beacon's URL (``?d=CASE``), so a hit says which one got out. MathJax
(JupyterLab 4, Notebook 7: MathJax 3.2 with every TeX package and ``safe``, which allows http URLs) loads the
``src`` of an ``\\mmlToken{mglyph}`` as an image; it reads math across ``<wbr>`` and HTML comments (its
``includeHtmlTags``), so a command split by either is whole to it. The model's text and the task add a markdown
image. Used by tests/browser/test_no_request_leaves.py (live and recorded, in JupyterLab) and
tests/security/test_no_request_leaves.py (what nbclient writes, what ``cellgate report`` renders).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from html import unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anthropic

from cellgate.extensions.anthropic import AgentLoop
from cellgate.extensions.anthropic.config import AgentSettings
from cellgate.extensions.anthropic.testing import FakeMessagesAPI, reply, text
from cellgate.gate import Session

# The smallest GIF: a hit gets a real image back, as an attacker's server would give.
PIXEL = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")
SPLITS = {"whole": "\\mmlToken", "wbr": "\\mml<wbr>Token", "comment": "\\mml<!-- -->Token"}
KERNEL_MIMES = {"html": "text/html", "markdown": "text/markdown", "latex": "text/latex"}


class Beacon:
    """An HTTP server on loopback that records the ``d`` of every request it gets."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._lock = threading.Lock()
        beacon = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with beacon._lock:
                    beacon.hits.extend(parse_qs(urlsplit(self.path).query).get("d", ["?"]))
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.send_header("Cache-Control", "no-store")  # a second look must ask again
                self.send_header("Content-Length", str(len(PIXEL)))
                self.end_headers()
                self.wfile.write(PIXEL)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def seen(self) -> list[str]:
        with self._lock:
            return sorted(set(self.hits))


@contextmanager
def beacon() -> Iterator[Beacon]:
    server = Beacon()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        thread.join(timeout=10)


def mathjax_reads(html: str) -> str:
    """The text MathJax reads of HTML, as its includeHtmlTags does: <br> a newline, <wbr> and comments nothing
    (any other tag ends a string, so it cannot join a command); character references decoded."""
    text = re.sub(r"<br\b[^>]*>", "\n", html, flags=re.IGNORECASE)
    text = re.sub(r"<wbr\b[^>]*>|<!--.*?-->", "", text, flags=re.IGNORECASE | re.DOTALL)
    return unescape(text)


def active_tex(html: str) -> list[str]:
    """The commands that would load something in MathJax, in the text it reads of ``html``."""
    return [m.group(0) for m in re.finditer(r"\\(mmlToken|style|bbox|href|require)(?![A-Za-z])", mathjax_reads(html))]


def glyph(command: str, url: str, case: str) -> str:
    """Math whose command, read as MathJax reads it, loads ``url?d=case`` as an image."""
    return f'${command}{{mglyph}}[src="{url}/?d={case}"]{{}}$'


def kernel_bundles(url: str) -> dict[str, dict[str, str]]:
    """One display bundle per MIME type and split (``html-wbr``...), each with one math expression."""
    return {f"{kind}-{split}": {mime: f"<p>x {glyph(command, url, f'{kind}-{split}')}</p>" if kind == "html"
                                else f"x {glyph(command, url, f'{kind}-{split}')}"}
            for kind, mime in KERNEL_MIMES.items() for split, command in SPLITS.items()}


def model_text(url: str, who: str) -> str:
    """What a prompt-injected model writes (``who`` is ``turn``), or a task carrying the same (``task``)."""
    return (f"Here is the chart ![chart]({url}/?d={who}-image) and "
            f'<img src="{url}/?d={who}-html-image"> and the formula '
            f"{glyph(SPLITS['whole'], url, f'{who}-tex')} and {glyph(SPLITS['wbr'], url, f'{who}-tex-wbr')}")


def model_cases(who: str) -> list[str]:
    return [f"{who}-image", f"{who}-html-image", f"{who}-tex", f"{who}-tex-wbr"]


def agent_record(notebook: Path, url: str) -> None:
    """A ``cellgate run`` (the real loop and Session, a local fake of the Messages API) whose task and whose
    model's one turn carry the payloads; its audit notebook is ``notebook``."""
    async def go() -> None:
        with FakeMessagesAPI([reply(text(model_text(url, "turn")))]) as api:
            client = anthropic.AsyncAnthropic(api_key="test-key", base_url=api.url, max_retries=0)
            async with Session(notebook=notebook, cwd=notebook.parent) as session:
                run = await AgentLoop(session, client, AgentSettings(model="claude-test")).run(model_text(url, "task"))
        assert run.ended == "end_turn", run

    asyncio.run(go())
