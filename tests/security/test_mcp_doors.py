"""Who reaches `cellgate mcp serve --transport http` on loopback without [mcp.auth] (tests/security/README.md, M10
and M11): another local user, and a web page through DNS rebinding.

Another user is a uid with no account (none is needed: any local process may connect to a loopback port), running
Debian's /usr/bin/python3 with nothing but the standard library. No sandbox is started: a JSON-RPC request that
the server answers 200 is reach enough (it would have run execute_python just as well).
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from conftest import CELLGATE, free_port, serve_on_a_free_port

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "stranger", "version": "1"}}}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

# The stranger's request, as any local process could send it: its HTTP status, or the error of its connect.
STRANGER = r'''
import json, sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers=json.loads(sys.argv[3]))
try:
    print(urllib.request.urlopen(request, timeout=30).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
except OSError as exc:
    print(type(getattr(exc, "reason", exc)).__name__)
'''


def project(tmp_path: Path) -> Path:
    """A cellgate.toml without [mcp.auth] and with no tools: what `mcp serve` starts from."""
    (tmp_path / "cellgate.toml").write_text(f'[audit]\ndir = "{tmp_path / "runs"}"\n')
    return tmp_path


@contextmanager
def serving(folder: Path, *args: str, host: str = "127.0.0.1") -> Iterator[str]:
    """`cellgate mcp serve --transport http ARGS` on ``host``; yields its URL, stops it after."""
    log_path = folder / "serve.log"
    with log_path.open("w") as log:
        def start(port: int) -> subprocess.Popen[str]:
            return subprocess.Popen([*CELLGATE, "mcp", "serve", "--transport", "http", "--host", host, "--port",
                                     str(port), *args], stdout=log, stderr=subprocess.STDOUT, cwd=folder, text=True)

        port, process = serve_on_a_free_port(start, log_path, f"cellgate mcp serve on {host}", host=host)
        try:
            yield f"http://{host}:{port}/mcp"
        finally:
            process.terminate()
            assert process.wait(60) in (0, -15), log_path.read_text()[-2000:]


def stranger_posts(uid: int, url: str) -> str:
    ran = subprocess.run(["/usr/bin/python3", "-c", STRANGER, url, json.dumps(INITIALIZE), json.dumps(HEADERS)],
                         user=uid, group=uid, extra_groups=[], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout.strip()


@pytest.mark.root_only("acting as another user")
def test_a_root_run_loopback_server_without_auth_is_refused_so_another_user_reaches_nothing(tmp_path: Path) -> None:
    folder = project(tmp_path)
    stranger = 2_000_000 + secrets.randbelow(1_000_000)  # no account: above real and systemd's dynamic users
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    process = subprocess.Popen([*CELLGATE, "mcp", "serve", "--transport", "http", "--port", str(port)], cwd=folder,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, said = process.communicate(timeout=60)  # it refuses before it listens, or it serves until stopped
    except subprocess.TimeoutExpired:
        reached = stranger_posts(stranger, url)
        process.kill()
        process.communicate()
        pytest.fail(f"the server started without [mcp.auth] and another user's request to it got {reached}")
    assert process.returncode == 2, said[-2000:]
    assert f"--transport http on 127.0.0.1:{port} without [mcp.auth]" in said, said
    assert "would serve every account of this host" in said and "--allow-local-users" in said, said
    assert stranger_posts(stranger, url) == "ConnectionRefusedError"
    # The control: with --allow-local-users the same stranger is served, which is what the flag says it allows.
    with serving(folder, "--allow-local-users") as url:
        assert stranger_posts(stranger, url) == "200"


def post(url: str, **headers: str) -> int:
    return httpx2.post(url, json=INITIALIZE, headers={**HEADERS, **headers}, timeout=30).status_code


def test_any_loopback_bind_refuses_a_foreign_host_or_origin(tmp_path: Path) -> None:
    """127.0.0.2 is loopback the MCP SDK does not name (it checks Host only on 127.0.0.1, localhost and ::1)."""
    with serving(project(tmp_path), "--allow-local-users", host="127.0.0.2") as url:
        netloc = url.split("/")[2]
        assert post(url, host="attacker.example") == 421  # a rebinding page's own name
        assert post(url, host=f"attacker.example:{netloc.split(':')[1]}") == 421
        assert post(url, origin="http://attacker.example") == 403
        assert post(url) == 200  # the control: the bound address itself, as a client writes it
        assert post(url, origin=f"http://{netloc}") == 200
