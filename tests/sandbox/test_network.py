"""The network as gated calls (issue 45): a cell's own HTTP clients reach what [[network.allow]] allows, through
the kernel's tunnel and the host's gate, each request a recorded call ``http``; the rest is refused, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from network_servers import config_file as _config
from network_servers import http_calls as _calls
from network_servers import upstream

from cellgate.gate.network.certs import SessionCA

pytestmark = [pytest.mark.gvisor]


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

        streamed = box.execute(  # a stream passes through as it comes: its first event before the server sends more
            "import urllib.request\n"
            f"stream = urllib.request.urlopen('{up.url}/api/sse')\n"
            "first = stream.readline() + stream.readline()\n"
            f"urllib.request.urlopen('{up.url}/api/go')\n"
            "print(repr(first), repr(stream.read()))")
        assert streamed.ok, streamed.text
        assert streamed.stdout == "b'data: 1\\n\\n' b'data: 2\\n\\n'\n", streamed.stdout
    box.close()
    calls = _calls(notebook)
    assert [(c["args"]["method"], c["decision"], c["ok"]) for c in calls][:3] == [
        ("GET", "allow", True), ("POST", "deny", False), ("GET", "deny", False)]
    sse = next(c for c in calls if c["args"]["url"].endswith("/sse"))
    assert sse["result"]["body_bytes"] == 18 and sse["result"]["status"] == 200
    assert calls[0]["args"]["rule"] == "network.allow[0]" and calls[0]["result"]["status"] == 200


TOKEN = "cg-test-token-5f1d2a9c"


def test_https_with_a_credential_added_on_the_host_100_requests_at_once_a_cut_response_then_replay_and_verify(
        session_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CG_TEST_TOKEN", TOKEN)
    upstream_ca = SessionCA.create("test-upstream")
    (tmp_path / "upstream-ca.pem").write_bytes(upstream_ca.cert_pem)
    notebook = tmp_path / "run.ipynb"
    with upstream(upstream_ca, tmp_path) as up:
        config = _config(tmp_path, (
            f'[[network.allow]]\nurl = "{up.url}/echo*"\n'
            'inject = { header = "Authorization", value = "Bearer ${CG_TEST_TOKEN}" }\n'
            f'[[network.allow]]\nurl = "{up.url}/big"\nmax_response_mb = 1\n'
            f'[[network.allow]]\nurl = "{up.url}/api/*"\n'), extra='upstream_ca = "upstream-ca.pem"\n')
        box = session_factory(config=str(config), tools=[], notebook=notebook)
        echoed = box.execute(  # the clients' default settings: the session's CA is trusted, nothing turned off
            "import urllib.request\n"
            f"r = urllib.request.urlopen('{up.url}/echo')\n"
            "print(r.headers['X-Echo-Authorization'])\nprint(r.read().decode())")
        assert echoed.ok, echoed.text
        assert up.seen[-1]["headers"]["Authorization"] == f"Bearer {TOKEN}"  # the server got it
        assert TOKEN not in echoed.text and "Authorization: " + "*" * len("Bearer " + TOKEN) in echoed.stdout

        seen = len(up.seen)
        carried = box.execute(  # the sandbox never holds the credential; one that turns up in a request is refused
            "import urllib.request, urllib.error\n"
            f"leak = urllib.request.Request('{up.url}/api/leak', headers={{'X-Leak': {TOKEN[:8]!r} + {TOKEN[8:]!r}}})\n"
            "try:\n    urllib.request.urlopen(leak)\n"
            "except urllib.error.HTTPError as e:\n    print(e.code, e.headers['X-Cellgate-Refused'])")
        assert "403 the request carries a credential the gate adds itself" in carried.stdout, carried.text
        assert len(up.seen) == seen

        many = box.execute(
            "import urllib.request\nfrom concurrent.futures import ThreadPoolExecutor\n"
            f"def get(n): return urllib.request.urlopen('{up.url}/api/item').read()\n"
            "with ThreadPoolExecutor(100) as pool:\n"
            "    got = list(pool.map(get, range(100)))\n"
            "print(len(got), len({g for g in got}), got[0])")
        assert many.ok, many.text
        assert many.stdout.startswith("100 1 b'hello GET /api/item'"), many.stdout

        cut = box.execute(
            "import urllib.request, urllib.error\n"
            f"try:\n    urllib.request.urlopen('{up.url}/big')\n"
            "except urllib.error.HTTPError as e:\n    print(e.code, e.headers['X-Cellgate-Refused'])")
        assert cut.ok and "502" in cut.stdout and "over the limit of 1048576 bytes" in cut.stdout, cut.text
        box.close()
    calls = _calls(notebook)
    assert len(calls) == 103 and not calls[1]["ok"] and calls[1]["decision"] == "deny"
    assert all(c["ok"] for c in [calls[0], *calls[2:102]]) and not calls[102]["ok"]
    run_files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".pem" and p.name != "cellgate.toml"]
    assert run_files and not [p for p in run_files if TOKEN.encode() in p.read_bytes()]  # notebook, journal, blobs

    from conftest import cellgate
    verified = cellgate("verify", str(notebook))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # The servers are gone: every request is answered from the record.
    replayed = cellgate("replay", str(notebook), "--config", str(config),
                        "--notebook", str(tmp_path / "replay.ipynb"))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    for number in (1, 2, 3, 4):
        assert f"cell {number}: recorded ok, replayed ok" in replayed.stdout, replayed.stdout


def _wheel(name: str, version: str) -> bytes:
    """A wheel of nothing but its metadata: what pip reads to resolve it."""
    import io
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return buffer.getvalue()


@pytest.mark.xdist_group("data-image")
def test_requests_httpx_and_pip_download_work_with_their_default_settings(
        session_factory: Any, tmp_path: Path) -> None:
    from cellgate.gate.sandbox.images import build
    from cellgate.gate.sandbox.images.spec import PROFILES

    build.build(PROFILES["data"])  # a no-op once built
    upstream_ca = SessionCA.create("test-upstream")
    (tmp_path / "upstream-ca.pem").write_bytes(upstream_ca.cert_pem)
    with upstream(upstream_ca, tmp_path) as up:
        wheel = "cgdemo-1.0-py3-none-any.whl"
        up.files["/simple/cgdemo/"] = f'<a href="/files/{wheel}">{wheel}</a>'.encode()
        up.files[f"/files/{wheel}"] = _wheel("cgdemo", "1.0")
        config = _config(tmp_path, f'[[network.allow]]\nurl = "{up.url}/*"\nmethods = ["GET", "HEAD", "POST"]\n',
                         extra='upstream_ca = "upstream-ca.pem"\n')
        box = session_factory(config=str(config), tools=[], notebook=tmp_path / "run.ipynb", image="data")
        clients = box.execute(
            "import requests, httpx\n"
            f"print(requests.get('{up.url}/api/r').text)\n"
            f"print(requests.post('{up.url}/api/p', json={{'a': 1}}).text)\n"
            f"print(httpx.get('{up.url}/api/x').text)\n"
            "with httpx.Client() as client:\n"
            f"    print([client.get('{up.url}/api/k').status_code for _ in range(3)])")
        assert clients.ok, clients.text
        assert clients.stdout.splitlines() == ["hello GET /api/r", "hello POST /api/p", "hello GET /api/x",
                                               "[200, 200, 200]"], clients.stdout
        downloaded = box.execute(
            "import subprocess, sys\n"
            "done = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '-d', '/tmp/dl', "
            f"'--index-url', '{up.url}/simple/', 'cgdemo'], capture_output=True, text=True)\n"
            "print(done.returncode, done.stderr[-2000:])\nimport os\nprint(os.listdir('/tmp/dl'))")
        assert downloaded.ok and f"['{wheel}']" in downloaded.stdout, downloaded.text
    box.close()


def test_approvals_budgets_and_refusals_before_a_decision_are_calls_of_the_record(
        session_factory: Any, tmp_path: Path) -> None:
    from cellgate.gate.testing import ScriptedApprover

    with upstream() as up:
        config = _config(tmp_path, (f'[[network.allow]]\nurl = "{up.url}/ask/*"\ndecision = "approve"\n'
                                    f'[[network.allow]]\nurl = "{up.url}/api/*"\n'
                                    '[policy.tools.http]\nmax_calls_per_cell = 3\n'))
        notebook = tmp_path / "run.ipynb"
        box = session_factory(config=str(config), tools=[], notebook=notebook,
                              approver=ScriptedApprover(["allow", "deny"]))
        code = ("import urllib.request, urllib.error\n"
                "def get(path, **kw):\n"
                "    try:\n"
                f"        return urllib.request.urlopen(urllib.request.Request('{up.url}' + path, **kw)).status\n"
                "    except urllib.error.HTTPError as e:\n"
                "        return e.code, e.headers['X-Cellgate-Refused']\n")
        asked = box.execute(code + "print(get('/ask/1'))\nprint(get('/ask/2'))\n"
                            "print(get('/api/a', headers={'Upgrade': 'websocket', 'Connection': 'Upgrade'}))\n"
                            "print(get('/api/b'))\nprint(get('/api/c'))")
        assert asked.ok, asked.text
        lines = asked.stdout.splitlines()
        assert lines[0] == "200" and lines[1].startswith("(403, ") and "network.allow[0] asks for approval" in lines[1], lines
        assert "WebSocket" in lines[2] and lines[3] == "200", lines
        assert lines[4].startswith("(429,"), lines  # over its budget of 3 (the refused approval counts)
        assert [s["path"] for s in up.seen] == ["/ask/1", "/api/b"]
    box.close()
    calls = _calls(notebook)
    assert [c["decision"] for c in calls] == ["approved", "approval-denied", "deny", "allow", "deny"], calls
    assert "WebSocket" in calls[2]["args"]["refused"]


def test_a_fork_reaches_the_network_through_its_own_gate_and_ca(tmp_path: Path) -> None:
    import asyncio

    from cellgate.gate import Session

    upstream_ca = SessionCA.create("test-upstream")
    (tmp_path / "upstream-ca.pem").write_bytes(upstream_ca.cert_pem)
    get = "import urllib.request\nprint(urllib.request.urlopen('{url}').read().decode())"

    async def scenario(url: str) -> tuple[str, str, str, str]:
        async with Session(tools=[], notebook=tmp_path / "parent.ipynb", cwd=tmp_path) as parent:
            before = (await parent.execute(get.format(url=f"{url}/api/parent"))).stdout
            (fork,) = await parent.fork(1)
            fork_notebook = str(fork.notebook_path)
            try:
                forked = (await fork.execute(get.format(url=f"{url}/api/fork"))).stdout
                ca = (await fork.execute("print(open('/tmp/cellgate-net/ca.pem').read())")).stdout
            finally:
                await fork.shutdown()
            after = (await parent.execute(get.format(url=f"{url}/api/again"))).stdout
            parent_ca = (await parent.execute("print(open('/tmp/cellgate-net/ca.pem').read())")).stdout
        return before + forked + after, ca, parent_ca, fork_notebook

    with upstream(upstream_ca, tmp_path) as up:
        _config(tmp_path, f'[[network.allow]]\nurl = "{up.url}/api/*"\n', extra='upstream_ca = "upstream-ca.pem"\n')
        said, fork_ca, parent_ca, fork_notebook = asyncio.run(scenario(up.url))
    assert said.splitlines() == ["hello GET /api/parent", "hello GET /api/fork", "hello GET /api/again"], said
    assert "BEGIN CERTIFICATE" in fork_ca and fork_ca != parent_ca  # each session its own CA
    assert [c["args"]["url"] for c in _calls(Path(fork_notebook))] == [f"{up.url}/api/fork"]
