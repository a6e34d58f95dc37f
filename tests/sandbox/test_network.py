"""The network as gated calls (issue 45): a cell's own HTTP clients reach what [[network.allow]] allows, through
the kernel's tunnel and the host's gate, each request a recorded call ``http``; the rest is refused, saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate.network.certs import SessionCA
from network_servers import upstream

pytestmark = [pytest.mark.gvisor]


def _config(folder: Path, rules: str, extra: str = "") -> Path:
    path = folder / "cellgate.toml"
    path.write_text(f"[network]\n{extra}\n{rules}")
    return path


def _calls(notebook: Path) -> list[dict[str, Any]]:
    journal = notebook.with_name(notebook.stem + ".journal.jsonl")
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    return [e["call"] for e in events if e.get("event") == "call-finished" and e["call"]["tool"] == "http"]


def test_urllib_reaches_an_allowed_url_and_a_method_or_path_no_rule_allows_is_a_403_saying_why(
        session_factory: Any, tmp_path: Path) -> None:
    with upstream() as up:
        config = _config(tmp_path, f'[[network.allow]]\nurl = "{up.url}/api/*"\n')
        notebook = tmp_path / "run.ipynb"
        box = session_factory(config=str(config), tools=[], notebook=notebook)
        got = box.execute(f"import urllib.request\nprint(urllib.request.urlopen('{up.url}/api/hello').read())")
        assert got.ok, got.text
        assert "hello GET /api/hello" in got.stdout
        assert [s["path"] for s in up.seen] == ["/api/hello"]

        refused = box.execute(
            "import urllib.request, urllib.error\n"
            f"for method, path in [('POST', '/api/hello'), ('GET', '/admin')]:\n"
            "    try:\n"
            f"        urllib.request.urlopen(urllib.request.Request('{up.url}' + path, data=b'x' if method == 'POST'"
            " else None, method=method))\n"
            "    except urllib.error.HTTPError as e:\n"
            "        print(e.code, e.headers['X-Cellgate-Refused'])\n"
            "        print(e.read().decode())\n")
        assert refused.ok, refused.text
        assert "403" in refused.stdout and "allows only GET, HEAD, not POST" in refused.stdout, refused.stdout
        assert "no [[network.allow]] rule matches" in refused.stdout and "[[network.allow]]\nurl =" in refused.stdout
        assert [s["path"] for s in up.seen] == ["/api/hello"]  # the refused ones never reached it
    box.close()
    calls = _calls(notebook)
    assert [(c["args"]["method"], c["decision"], c["ok"]) for c in calls] == [
        ("GET", "allow", True), ("POST", "deny", False), ("GET", "deny", False)]
    assert calls[0]["args"]["rule"] == "network.allow[0]" and calls[0]["result"]["status"] == 200
