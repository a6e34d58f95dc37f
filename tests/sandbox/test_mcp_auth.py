"""`cellgate mcp serve --transport http` with [mcp.auth] (issue 20), driven by the official MCP client over HTTPS
(the server's own --certfile/--keyfile): a local OAuth issuer (an RSA key made here, its JWKS served on localhost),
static tokens from a file, sessions owned by their principal, per-principal quotas.

One server for the module; only the ownership and quota test starts sandboxes (two)."""

from __future__ import annotations

import asyncio
import datetime
import http.server
import json
import secrets
import ssl
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import jwt
import nbformat
import pytest
from conftest import CELLGATE, serve_on_a_free_port
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

SCOPE = "cellgate:execute"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    import ipaddress

    key = rsa_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    certfile, keyfile = folder / "cert.pem", folder / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return certfile, keyfile


class Issuer:
    """A local authorization server, as far as a resource server sees one: its JWKS on localhost, tokens it signs."""

    def __init__(self) -> None:
        self.key = rsa_key()
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": "test-key", "use": "sig", "alg": "RS256"}]}).encode()

        class Jwks(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def token(self, audience: str, key: rsa.RSAPrivateKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "aud": audience, "sub": "dave", "iat": now, "exp": now + 300, "scope": SCOPE,
                   **claims}
        return jwt.encode({k: v for k, v in payload.items() if v is not None}, key or self.key, algorithm="RS256",
                          headers={"kid": "test-key"})


@dataclass
class Served:
    url: str
    tls: ssl.SSLContext
    issuer: Issuer
    tokens: dict[str, str]  # principal -> its static token
    folder: Path

    def http(self, token: str | None = None) -> httpx2.AsyncClient:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx2.AsyncClient(headers=headers, verify=self.tls, timeout=httpx2.Timeout(30, read=300))

    @asynccontextmanager
    async def client(self, token: str) -> AsyncIterator[Client]:
        async with self.http(token) as http, Client(streamable_http_client(self.url, http_client=http)) as client:
            yield client


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("mcp-auth")
    certfile, keyfile = self_signed(folder)
    issuer = Issuer()
    tokens = {name: secrets.token_urlsafe(32) for name in ("alice", "bob")}
    (folder / "tokens").write_text("# principal token\n" + "".join(f"{n} {t}\n" for n, t in tokens.items()))
    (folder / "ops.py").write_text('def deploy() -> str:\n    """Deploy."""\n    return "deployed"\n')
    log_path = folder / "serve.log"
    log = log_path.open("w")

    def start(port: int) -> subprocess.Popen[str]:
        (folder / "cellgate.toml").write_text(f"""
[tools]
modules = ["ops.py"]
[audit]
dir = "runs"
[policy.tools.deploy]
decision = "deny"
[[policy.tools.deploy.rules]]
name = "alice deploys"
when = {{}}
principals = ["alice"]
decision = "allow"
[mcp.auth]
resource = "https://127.0.0.1:{port}/mcp"
issuer = "{issuer.url}"
jwks_url = "{issuer.url}/jwks.json"
tokens_file = "tokens"
[mcp.quotas]
sessions = 1
calls_per_session = 2
[mcp.quotas.principals.bob]
calls_per_session = 10
calls_per_hour = 2
""")
        return subprocess.Popen([*CELLGATE, "mcp", "serve", "--transport", "http", "--port", str(port),
                                 "--certfile", str(certfile), "--keyfile", str(keyfile)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=folder, text=True)

    port, process = serve_on_a_free_port(start, log_path, "cellgate mcp serve --transport http with [mcp.auth]")
    tls = ssl.create_default_context(cafile=str(certfile))
    yield Served(f"https://127.0.0.1:{port}/mcp", tls, issuer, tokens, folder)
    process.terminate()
    assert process.wait(60) in (0, -15), log_path.read_text()[-2000:]
    log.close()
    issuer.httpd.shutdown()
    issuer.httpd.server_close()


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 240))


async def status(served: Served, token: str | None) -> tuple[int, str]:
    """A raw request to the endpoint: its status and WWW-Authenticate challenge."""
    async with served.http(token) as http:
        reply = await http.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "server/discover"},
                                headers={"accept": "application/json, text/event-stream"})
    return reply.status_code, reply.headers.get("www-authenticate", "")


def test_no_token_gets_401_with_the_challenge_and_the_resource_metadata_names_the_issuer(served: Served) -> None:
    metadata_url = served.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")

    async def scenario() -> None:
        code, challenge = await status(served, None)
        assert code == 401
        assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
        assert f'resource_metadata="{metadata_url}"' in challenge
        async with served.http() as http:
            metadata = (await http.get(metadata_url)).json()
        assert metadata["resource"] == served.url
        assert metadata["authorization_servers"] == [served.issuer.url]
        assert metadata["scopes_supported"] == [SCOPE]
        assert (await status(served, "not-a-token"))[0] == 401

    run(scenario())


def test_a_jwt_from_the_issuer_for_this_resource_with_the_scope_works_and_no_other_does(served: Served) -> None:
    issuer, now = served.issuer, int(time.time())

    async def scenario() -> None:
        async with served.client(issuer.token(served.url)) as client:
            found = await client.call_tool("search_tools", {"query": ""})
            assert found.is_error is False
        refused = {
            "wrong audience": issuer.token("https://elsewhere.example/mcp"),
            "expired": issuer.token(served.url, exp=now - 3600, iat=now - 7200),
            "another issuer": issuer.token(served.url, iss="https://evil.example"),
            "signed by another key": issuer.token(served.url, key=rsa_key()),
            "no subject": issuer.token(served.url, sub=None),
        }
        for what, token in refused.items():
            code, challenge = await status(served, token)
            assert (code, 'error="invalid_token"' in challenge) == (401, True), what
        code, challenge = await status(served, issuer.token(served.url, scope="openid profile"))
        assert code == 403 and 'error="insufficient_scope"' in challenge
        # The official client that just worked gets nowhere with a refused token (the SDK reports the 401 as an
        # MCPError "Server returned an error response" inside its task groups).
        with pytest.raises(ExceptionGroup) as info:
            async with served.client(refused["expired"]) as client:
                await client.call_tool("search_tools", {"query": ""})
        assert info.group_contains(MCPError, match="error response", depth=None)

    run(scenario())


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def execute(client: Client, code: str, session: str | None = None) -> Any:
    return await client.call_tool("execute_python", {"code": code} | ({"session": session} if session else {}))


async def read_error(client: Client, handle: str) -> str:
    with pytest.raises(MCPError) as info:
        await client.read_resource(f"cellgate://sessions/{handle}/notebook")
    return str(info.value)


def test_sessions_belong_to_their_principal_and_quotas_hold_each_principal_alone(served: Served,
                                                                              runsc: object) -> None:
    tokens = served.tokens

    async def scenario() -> None:
        async with served.client(tokens["alice"]) as alice, served.client(tokens["bob"]) as bob:
            first = await execute(alice, "x = 'alice-secret'\nprint(tools.deploy())")
            assert text_of(first) == "deployed\n" and first.is_error is False, text_of(first)
            handle = first.structured_content["session"]
            made_up = secrets.token_urlsafe(16)  # the same length as a real handle

            # Bob holding Alice's handle is refused exactly as a handle that never existed.
            def same(theirs: str, unknown: str) -> None:
                assert theirs.replace(handle, "H") == unknown.replace(made_up, "H"), (theirs, unknown)

            stolen, fake = await execute(bob, "print(x)", handle), await execute(bob, "print(x)", made_up)
            assert stolen.is_error and fake.is_error and "no session" in text_of(stolen)
            same(text_of(stolen), text_of(fake))
            same(await read_error(bob, handle), await read_error(bob, made_up))
            closed = await bob.call_tool("close_session", {"session": handle})
            fake_close = await bob.call_tool("close_session", {"session": made_up})
            same(text_of(closed), text_of(fake_close))
            assert closed.is_error

            # Alice's session is untouched; its notebook says whose it is.
            again = await execute(alice, "print(x)", handle)
            assert text_of(again) == "alice-secret\n"
            resource = await alice.read_resource(f"cellgate://sessions/{handle}/notebook")
            nb = nbformat.reads(resource.contents[0].text, as_version=4)
            assert nb.metadata.cellgate.principal == {"name": "alice", "issuer": "static-token"}
            journal = served.folder / "runs" / nb.metadata.cellgate.journal["file"]
            assert '"event":"mcp-principal"' in journal.read_text().replace(" ", "")

            # Alice's quotas: two calls per session, one session at once.
            third = await execute(alice, "print(1)", handle)
            assert third.is_error and "[mcp.quotas] calls_per_session = 2" in text_of(third), text_of(third)
            second_session = await execute(alice, "print(1)")
            assert second_session.is_error and "principal 'alice' already has 1 sessions open" in text_of(
                second_session) and "sessions = 1" in text_of(second_session), text_of(second_session)

            # Bob is not held by Alice's limits, only by his own: two calls an hour.
            # The policy rule that names Alice does not apply to Bob: deploy is denied in his session.
            mine = await execute(bob, "y = 2\ntry:\n    tools.deploy()\nexcept tools.ToolDenied as e:\n    print(e)\n"
                                      "print(y)")
            assert "denied by policy rule tools.deploy.decision" in text_of(mine), text_of(mine)
            assert text_of(mine).endswith("2\n"), text_of(mine)
            assert text_of(await execute(bob, "print(y + 1)", mine.structured_content["session"])) == "3\n"
            over = await execute(bob, "print(y)", mine.structured_content["session"])
            assert over.is_error and "principal 'bob' has made 2 execute_python calls in the last hour" in text_of(
                over) and "calls_per_hour = 2" in text_of(over), text_of(over)

            closed = await alice.call_tool("close_session", {"session": handle})
            assert closed.is_error is False

    run(scenario())
