"""Issue 45 against a hostile cell (SECURITY.md N8, L5): the gate is the sandbox's only way out, and a rule that
lets a URL through never lets the gate reach what only the host reaches.

Each test is an attack from inside a real gVisor sandbox, against local servers on the host's loopback
(``network_servers.upstream``) that record what reached them, and a listener on the host's own address that
counts connections: the attack is refused (a 403, 421 or 400 whose text says why) or fails at once, and the
servers received nothing.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from network_servers import config_file as _config
from network_servers import http_calls as _calls
from network_servers import upstream

from cellgate.gate.network.addresses import own_addresses
from cellgate.gate.network.certs import SessionCA

pytestmark = [pytest.mark.gvisor]

# Defined in the cell: each request as [status, X-Cellgate-Refused, body] (or ["error", kind, text]), and how long.
FETCH = """
import json, time, urllib.request, urllib.error
def fetch(url, opener=None):
    started = time.monotonic()
    try:
        r = (opener or urllib.request.build_opener()).open(url, timeout=20)
        got = [r.status, None, r.read().decode()]
    except urllib.error.HTTPError as e:
        got = [e.code, e.headers.get("X-Cellgate-Refused"), e.read().decode()]
    except Exception as e:
        got = ["error", type(e).__name__, str(e)]
    return got + [round(time.monotonic() - started, 3)]
"""

# Defined in the cell: raw bytes to the sandbox's proxy endpoint, as a client that ignores HTTP libraries does.
RAW = """
import os, socket, ssl, time, urllib.parse
PROXY = ("127.0.0.1", urllib.parse.urlsplit(os.environ["HTTPS_PROXY"]).port)
def until_eof(s):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ssl.SSLError, OSError) as e:
            return data, type(e).__name__
        if not chunk:
            return data, "eof"
        data += chunk
def connect(target):
    s = socket.create_connection(PROXY, timeout=10)
    s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
    head = b""
    while b"\\r\\n\\r\\n" not in head:  # byte by byte: nothing after the proxy's answer is read here
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, head
def in_tls(target, request):
    s, head = connect(target)
    assert head.startswith(b"HTTP/1.1 200"), head
    t = ssl.create_default_context().wrap_socket(s, server_hostname=target.rsplit(":", 1)[0])
    t.sendall(request)
    return until_eof(t)
"""


def _json_out(got: Any) -> Any:
    assert got.ok, got.text
    return json.loads(got.stdout.strip().splitlines()[-1])


def _host_address() -> str:
    """One of the host's own non-loopback IPv4 addresses (what a cell might guess the host is at)."""
    found = sorted(str(ip) for ip in own_addresses() if ip.version == 4 and not ip.is_loopback)
    assert found, f"this host has no IPv4 address besides loopback ({sorted(map(str, own_addresses()))})"
    return found[0]


@contextmanager
def _listener(address: str) -> Iterator[socket.socket]:
    """A TCP listener that accepts nothing itself: a connection that reached it waits in its backlog."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        sock.listen(16)
        sock.setblocking(False)
        yield sock


def _was_connected(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_wildcard_rule_never_reaches_loopback_metadata_private_or_the_hosts_own_address_in_any_spelling(
        session_factory: Any, tmp_path: Path) -> None:
    """Attack: under ``http://*/*`` (and the upstream's port), name what only the host reaches: its loopback by
    name, as 127.0.0.1, [::1] and IPv4-mapped, in decimal/hex/short spellings; the metadata address; RFC 1918;
    the host's own address."""
    own = _host_address()
    with upstream() as up, _listener(own) as host_side:
        port, own_port = up.port, host_side.getsockname()[1]
        config = _config(tmp_path, "".join(
            f'[[network.allow]]\nurl = "{url}"\nmethods = ["*"]\n' for url in (
                "http://*/*", "https://*/*", f"http://*:{port}/*", f"http://*:{own_port}/*")))
        notebook = tmp_path / "run.ipynb"
        box = session_factory(config=str(config), tools=[], notebook=notebook)
        cases = {  # URL -> what the refusal must say (its X-Cellgate-Refused header and its body)
            f"http://localhost:{port}/": "the name 'localhost' resolves to",  # any answer of a name refuses it
            f"http://127.0.0.1:{port}/": "127.0.0.1 (loopback)",
            f"http://[::1]:{port}/": "::1 (loopback)",
            f"http://[::ffff:127.0.0.1]:{port}/": "loopback",
            "http://169.254.169.254/latest/": "169.254.169.254 (link-local (cloud metadata))",
            "http://10.0.0.1/": "10.0.0.1 (private (RFC 1918))",
            f"http://{own}:{own_port}/": f"{own} (the host's own address)",
            f"http://2130706433:{port}/": "not an IPv4 address in four decimal parts",
            f"http://0x7f000001:{port}/": "not an IPv4 address in four decimal parts",
            f"http://127.1:{port}/": "not an IPv4 address in four decimal parts",
            f"http://0177.0.0.1:{port}/": "not an IPv4 address in four decimal parts",
        }
        box.execute(FETCH)
        got = _json_out(box.execute(f"print(json.dumps([fetch(u) for u in {list(cases)!r}]))"))
        for (url, why), (status, refused, body, seconds) in zip(cases.items(), got, strict=True):
            assert status in (400, 403) and refused, (url, status, refused, body)
            assert why in body and why in refused, (url, why, body)
            assert "(loopback" in body if "localhost" in url else True, (url, body)
            assert seconds < 5, (url, seconds)  # refused before any connection attempt, not after a timeout
        assert up.seen == [] and not _was_connected(host_side)
    box.close()
    calls = _calls(notebook)  # every refusal a denied call of the record, saying why
    assert len(calls) == len(cases) and all(c["decision"] == "deny" and not c["ok"] for c in calls), calls
    refused = [c["args"]["refused"] for c in calls]
    assert sum("the gate never connects there" in r for r in refused) == 7, refused
    assert sum("four decimal parts" in r for r in refused) == 4, refused


def test_redirect_from_an_allowed_url_to_loopback_or_metadata_is_a_new_request_and_refused(
        session_factory: Any, tmp_path: Path) -> None:
    """Attack: an allowed server (127.0.0.1:PORT, named literally) answers 302 to another loopback server, or to
    the metadata address; the cell's client follows."""
    with upstream() as up, upstream() as other:
        config = _config(tmp_path, f'[[network.allow]]\nurl = "{up.url}/*"\n'
                                   '[[network.allow]]\nurl = "http://*/*"\n')
        notebook = tmp_path / "run.ipynb"
        box = session_factory(config=str(config), tools=[], notebook=notebook)
        box.execute(FETCH)
        urls = [f"{up.url}/redirect?to={other.url}/secret", f"{up.url}/redirect?to=http://169.254.169.254/latest/"]
        (status, refused, body, _), (m_status, m_refused, m_body, _) = _json_out(
            box.execute(f"print(json.dumps([fetch(u) for u in {urls!r}]))"))
        # The second hop is a request of its own: no rule names the other port, and the wildcard never reaches
        # the metadata address (only a rule naming it literally would).
        assert status == 403 and refused == f"no [[network.allow]] rule matches {other.url}/secret", (status, body)
        assert m_status == 403 and "169.254.169.254 (link-local (cloud metadata))" in m_refused, (m_status, m_body)
        assert [s["path"] for s in up.seen] == [u.removeprefix(up.url) for u in urls]  # the first hops, 302s
        assert other.seen == []
    box.close()
    calls = _calls(notebook)
    assert [(c["args"]["url"], c["decision"], c["ok"]) for c in calls] == [
        (urls[0], "allow", True), (f"{other.url}/secret", "deny", False),
        (urls[1], "allow", True), ("http://169.254.169.254/latest/", "deny", False)]
    assert calls[0]["result"]["status"] == 302


def test_no_way_around_the_gate_raw_socket_proxyless_opener_and_udp_fail_at_once(
        session_factory: Any, tmp_path: Path) -> None:
    """Attack: skip the proxy settings: a raw TCP socket to a host server (on the host's loopback and on its own
    address), an opener with no proxies, a UDP DNS query to 8.8.8.8."""
    own = _host_address()
    with upstream() as up, _listener(own) as host_side:
        own_port = host_side.getsockname()[1]
        config = _config(tmp_path, f'[[network.allow]]\nurl = "{up.url}/*"\n')  # the gate would allow it
        box = session_factory(config=str(config), tools=[], notebook=tmp_path / "run.ipynb")
        box.execute(FETCH)
        got = _json_out(box.execute(
            "import socket\n"
            "def tcp(address):\n"
            "    started = time.monotonic()\n"
            "    try:\n"
            "        socket.create_connection(address, timeout=20).close()\n"
            "        result = 'connected'\n"
            "    except OSError as e:\n"
            "        result = type(e).__name__ + ' ' + str(e.errno)\n"
            "    return [result, round(time.monotonic() - started, 3)]\n"
            "def udp():\n"
            "    started = time.monotonic()\n"
            "    query = bytes.fromhex('abcd01000001000000000000076578616d706c6503636f6d0000010001')\n"
            "    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:\n"
            "        s.settimeout(3)\n"
            "        try:\n"
            "            s.sendto(query, ('8.8.8.8', 53))\n"
            "            result = 'answered ' + s.recv(512).hex()\n"
            "        except OSError as e:\n"
            "            result = type(e).__name__ + ' ' + str(e.errno)\n"
            "    return [result, round(time.monotonic() - started, 3)]\n"
            "direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
            "print(json.dumps({\n"
            f"    'loopback': tcp(('127.0.0.1', {up.port})), 'host': tcp(({own!r}, {own_port})),\n"
            f"    'no_proxy': fetch({up.url + '/api/x'!r}, direct),\n"
            "    'udp': udp()}))"))
        box.close()
        # The sandbox's 127.0.0.1 is its own (nothing listens on that port); the host has no route at all.
        assert got["loopback"][0].startswith("ConnectionRefusedError") and got["loopback"][1] < 3, got
        assert got["host"][0] in UNREACHABLE and got["host"][1] < 3, got
        assert got["no_proxy"][:2] == ["error", "URLError"] and "refused" in got["no_proxy"][2], got
        assert got["no_proxy"][3] < 3, got
        # The send fails, or goes nowhere (no answer); either way no later than the cell's own 3 s wait.
        assert (got["udp"][0] in UNREACHABLE or got["udp"][0] == "TimeoutError None") and got["udp"][1] < 4, got
        assert up.seen == [] and not _was_connected(host_side)


UNREACHABLE = ("OSError 101", "OSError 113")  # ENETUNREACH, EHOSTUNREACH: no route from the sandbox


@pytest.fixture()
def tls_upstream_ca(tmp_path: Path) -> SessionCA:
    ca = SessionCA.create("test-upstream")
    (tmp_path / "upstream-ca.pem").write_bytes(ca.cert_pem)
    return ca


def test_connect_from_a_raw_socket_refused_before_tls_and_a_plaintext_request_in_an_allowed_tunnel_fails(
        session_factory: Any, tmp_path: Path, tls_upstream_ca: SessionCA) -> None:
    """Attack: speak to the proxy endpoint directly: CONNECT to a host:port no rule reaches; then CONNECT to an
    allowed HTTPS upstream and send a plain-text request inside the tunnel, skipping the gate's TLS."""
    with upstream(tls_upstream_ca, tmp_path) as up, upstream() as other:
        config = _config(tmp_path, f'[[network.allow]]\nurl = "{up.url}/*"\n',
                         extra='upstream_ca = "upstream-ca.pem"\n')
        box = session_factory(config=str(config), tools=[], notebook=tmp_path / "run.ipynb")
        box.execute(RAW)
        refused = box.execute(
            f"s, head = connect('127.0.0.1:{other.port}')\n"
            "rest, end = until_eof(s)\nprint(repr(head + rest), end)")
        assert refused.ok, refused.text
        assert refused.stdout.startswith("b'HTTP/1.1 403 "), refused.stdout
        assert f"X-Cellgate-Refused: no [[network.allow]] rule reaches https://127.0.0.1:{other.port}" in (
            refused.stdout) and refused.stdout.rstrip().endswith("eof"), refused.stdout

        plain = _json_out(box.execute(
            "import json, time\nstarted = time.monotonic()\n"
            f"s, head = connect('127.0.0.1:{up.port}')\n"
            f"s.sendall(b'GET /api/x HTTP/1.1\\r\\nHost: 127.0.0.1:{up.port}\\r\\nConnection: close\\r\\n\\r\\n')\n"
            "data, end = until_eof(s)\n"
            "print(json.dumps([head.decode('latin-1'), data.decode('latin-1'), end, time.monotonic() - started]))"))
        box.close()
        head, data, end, seconds = plain
        assert head.startswith("HTTP/1.1 200"), plain  # the tunnel was allowed...
        assert "HTTP/" not in data and "hello" not in data, plain  # ...but no HTTP answer came through it
        assert end in ("eof", "ConnectionResetError") and seconds < 5, plain
        assert up.seen == [] and other.seen == []


def test_domain_fronting_inside_the_tls_tunnel_is_refused_and_the_tunnels_target_is_the_only_destination(
        session_factory: Any, tmp_path: Path, tls_upstream_ca: SessionCA) -> None:
    """Attack: CONNECT to an allowed HTTPS host, then inside the TLS ask for another: a Host header naming
    another host, an absolute URL of another host, a second CONNECT, a Host naming another port."""
    with upstream(tls_upstream_ca, tmp_path) as up, upstream() as other:
        config = _config(tmp_path, f'[[network.allow]]\nurl = "{up.url}/*"\n',
                         extra='upstream_ca = "upstream-ca.pem"\n')
        box = session_factory(config=str(config), tools=[], notebook=tmp_path / "run.ipynb")
        box.execute(RAW)
        target = f"127.0.0.1:{up.port}"
        requests = {
            "control": f"GET /api/ok HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n",
            "fronted": "GET /api/x HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
            "absolute": f"GET http://127.0.0.1:{other.port}/x HTTP/1.1\r\nHost: {target}\r\n\r\n",
            "connect": f"CONNECT 127.0.0.1:{other.port} HTTP/1.1\r\nHost: 127.0.0.1:{other.port}\r\n\r\n",
            "other_port": f"GET /api/port HTTP/1.1\r\nHost: 127.0.0.1:{other.port}\r\nConnection: close\r\n\r\n",
        }
        got = _json_out(box.execute(
            "import json\n"
            f"print(json.dumps({{k: in_tls({target!r}, v.encode())[0].decode() for k, v in {requests!r}.items()}}))"))
        box.close()
        assert got["control"].startswith("HTTP/1.1 200") and got["control"].endswith("hello GET /api/ok")
        assert got["fronted"].startswith("HTTP/1.1 421"), got["fronted"]
        assert "X-Cellgate-Refused: the Host header 'evil.example' is not the host '127.0.0.1'" in got["fronted"]
        for name in ("absolute", "connect"):
            assert got[name].startswith("HTTP/1.1 400"), got[name]
            assert "inside the tunnel is not a path" in got[name], got[name]
        # A Host naming another port of the same host changes nothing: the request goes to the tunnel's target,
        # with the target's own Host.
        assert got["other_port"].endswith("hello GET /api/port"), got["other_port"]
        assert [(s["path"], s["headers"]["Host"]) for s in up.seen] == [("/api/ok", target), ("/api/port", target)]
        assert other.seen == []



def test_probing_by_odd_spellings_or_a_fronted_host_leaves_a_record_of_each_refusal(
        session_factory: Any, tmp_path: Path, tls_upstream_ca: SessionCA) -> None:
    """Attack: map what the gate reaches without leaving a trace: a CONNECT no rule reaches, a URL in an address
    spelling the gate refuses, a fronted Host inside an allowed tunnel, a loopback address under a wildcard."""
    with upstream(tls_upstream_ca, tmp_path) as tls, upstream() as up:
        config = _config(tmp_path, f'[[network.allow]]\nurl = "{tls.url}/*"\n'
                                   f'[[network.allow]]\nurl = "http://*:{up.port}/*"\n',
                         extra='upstream_ca = "upstream-ca.pem"\n')
        notebook = tmp_path / "run.ipynb"
        box = session_factory(config=str(config), tools=[], notebook=notebook)
        box.execute(FETCH + RAW)
        fronted = "GET /api/x HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
        got = _json_out(box.execute(
            f"s, head = connect('127.0.0.1:{up.port}')\n"
            f"print(json.dumps([head.decode('latin-1'), fetch('http://2130706433:{up.port}/')[0], "
            f"in_tls('127.0.0.1:{tls.port}', {fronted!r}.encode())[0].decode(), "
            f"fetch('http://127.0.0.1:{up.port}/nothing')[0]]))"))
        box.close()
        assert up.seen == [] and tls.seen == []
    assert got[0].startswith("HTTP/1.1 403") and got[1] == 400 and got[2].startswith("HTTP/1.1 421"), got
    assert got[3] == 403, got
    calls = _calls(notebook)  # each refusal a denied (or failed) call of the record, naming what was asked
    assert len(calls) == 4 and not [c for c in calls if c["ok"]], [c["args"]["url"] for c in calls]
    assert "2130706433" in json.dumps(calls) and "evil.example" in json.dumps(calls)
