"""Local upstreams for the network tests: an HTTP and an HTTPS server on the host's loopback that record what
reached them (the HTTPS one's certificate from a CA of the test's own, trusted by the gate through
``[network] upstream_ca``)."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from cellgate.gate.network.certs import SessionCA

BIG_BYTES = 3 << 20


@dataclass
class Upstream:
    url: str
    port: int
    seen: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # path -> body, served as they are (a package index)
    go: threading.Event = field(default_factory=threading.Event)  # /sse sends its second event once /go is asked


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: Upstream

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.upstream.seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                   "body": body})
        if self.path in self.upstream.files:
            payload = self.upstream.files[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if self.path.endswith("/") else "application/octet-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        if self.path.endswith("/go"):
            self.upstream.go.set()
        if self.path.endswith("/sse"):  # chunked: the second event waits for the client to have read the first
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for number, event in enumerate((b"data: 1\n\n", b"data: 2\n\n")):
                if number:
                    self.upstream.go.wait(30)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.path.split("to=", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/big"):
            payload = b"x" * BIG_BYTES
        elif self.path.startswith("/echo"):  # the request's headers back, as a careless API does
            token = (self.headers.get("Authorization") or "").split(" ", 1)[-1]  # the bare token, without "Bearer"
            payload = ("\n".join(f"{k}: {v}" for k, v in self.headers.items()) + f'\n{{"token": "{token}"}}').encode()
        else:
            payload = f"hello {self.command} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(payload)))
        if self.path.startswith("/echo"):
            self.send_header("X-Echo-Authorization", self.headers.get("Authorization", ""))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _answer


def config_file(folder: Path, rules: str, extra: str = "") -> Path:
    """A cellgate.toml in ``folder`` with a [network] section (``extra``) and ``rules``."""
    path = folder / "cellgate.toml"
    path.write_text(f"[network]\n{extra}\n{rules}")
    return path


def http_calls(notebook: Path) -> list[dict[str, Any]]:
    """The recorded calls ``http`` of a run, in order, from its journal."""
    journal = notebook.with_name(notebook.stem + ".journal.jsonl")
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    return [e["call"] for e in events if e.get("event") == "call-finished" and e["call"]["tool"] == "http"]


@contextmanager
def upstream(tls_ca: SessionCA | None = None, folder: Path | None = None) -> Iterator[Upstream]:
    """A threaded server on 127.0.0.1 (HTTPS with a leaf of ``tls_ca`` for 127.0.0.1 and localhost)."""
    handler = type("Handler", (_Handler,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = server.server_address[1]
    scheme = "http"
    if tls_ca is not None:
        assert folder is not None
        cert, key = tls_ca.issue("127.0.0.1")
        pem = folder / "upstream-leaf.pem"
        pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pem)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    handler.upstream = up = Upstream(f"{scheme}://127.0.0.1:{port}", port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield up
    finally:
        server.shutdown()
        server.server_close()
