"""One request of the sandbox's, as the gated call ``http``: what the record keeps of it, and the upstream fetch.

The call's arguments are what was asked (method, the normalized URL, the request's headers with any credential
the gate adds left out, the body's sha256 and size, the rule that matched); its result is what came back (status,
headers, the body's sha256 and size, the body itself up to ``RECORDED_BODY_BYTES`` so a replay can answer it,
the address the gate connected to). The fetch streams the response to the client as it arrives: a chunked or
SSE response is never held whole, and a response over its limit is cut.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import h11

from cellgate.gate.calls.registry import Tool
from cellgate.gate.network.addresses import Checked, open_checked, resolve_checked
from cellgate.gate.network.rules import Match, NetworkSettings, Target

TOOL_NAME: Final = "http"
READ_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
RECORDED_BODY_BYTES: Final = 8 << 20  # a response body up to this is kept in the record (a blob), for replays
READ_BYTES: Final = 1 << 20
# Headers of one hop, never passed on (RFC 9110 7.6.1), and the proxy's own.
HOP_HEADERS: Final = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                                "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade", "host"})

PARAMETERS: Final = {
    "type": "object",
    "properties": {
        "method": {"type": "string"}, "url": {"type": "string"},
        "headers": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "body_sha256": {"type": "string"}, "body_bytes": {"type": "integer"},
        "rule": {"type": ["string", "null"]}, "refused": {"type": "string"},
    },
    "required": ["method", "url", "headers", "body_sha256", "body_bytes"],
}
TEMPLATE: Final = Tool(name=TOOL_NAME, description="an HTTP(S) request made by code in the sandbox",
                       parameters=PARAMETERS, function=lambda **_: None, source="network")


class ResponseTooLarge(Exception):
    """A response the gate does not send on: over its limit, or one it cannot mask."""


@dataclass
class Exchange:
    """One request as the client sent it, and what its fetch did."""

    method: str
    target: Target
    headers: list[tuple[str, str]]  # the client's, hop headers removed
    body: bytes
    match: Match | None
    refused: str | None = None  # why the gate refused it before any rule could decide (recorded)
    checked: Checked | None = None  # the address the gate resolved and checked, the one it connects to
    # Sends the response's head, then each body chunk, then None at its end (``proxy`` writes it to the client).
    respond: Callable[[int, list[tuple[str, str]], int | None], Awaitable[None]] = field(repr=False, default=None)  # type: ignore[assignment]
    send_body: Callable[[bytes | None], Awaitable[None]] = field(repr=False, default=None)  # type: ignore[assignment]
    abort: Callable[[], None] = field(repr=False, default=None)  # type: ignore[assignment]
    responded: bool = False

    def args(self) -> dict[str, Any]:
        return {"method": self.method, "url": self.target.url(), "headers": [list(h) for h in self.headers],
                "body_sha256": hashlib.sha256(self.body).hexdigest(), "body_bytes": len(self.body),
                "rule": self.match.label if self.match is not None else None,
                **({"refused": self.refused} if self.refused else {})}

    def tool(self, decision: str, function: Callable[..., Any]) -> Tool:
        decided_by = self.refused or (self.match.label if self.match is not None else "no [[network.allow]] rule")
        return http_tool(self.method, decision, function, decided_by)


def http_tool(method: str, decision: str, function: Callable[..., Any], decided_by: str) -> Tool:
    """One request's tool: its decision is the rule's (or deny), its effect the method's."""
    return Tool(name=TOOL_NAME, description=TEMPLATE.description, parameters=PARAMETERS, function=function,
                source="network", default_decision=decision,  # type: ignore[arg-type]
                effect="read" if method in READ_METHODS else "write", effect_from="the request's method",
                decided_by=f"network: {decided_by}"[:500])


def mask(data: bytes, secrets: tuple[bytes, ...]) -> bytes:
    """``data`` with each secret overwritten by as many asterisks (lengths, and so a response's framing, kept)."""
    for secret in secrets:
        if secret and secret in data:
            data = data.replace(secret, b"*" * len(secret))
    return data


class Masker:
    """Masks a body as it streams: the last bytes of each chunk wait for the next, so a secret split between two
    reads is masked too."""

    def __init__(self, secrets: tuple[bytes, ...]) -> None:
        self.secrets = secrets
        self.hold = max((len(s) for s in secrets), default=1) - 1
        self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = mask(self.pending + chunk, self.secrets)
        if not self.hold:
            return data
        self.pending = data[-self.hold:]
        return data[:-self.hold]

    def end(self) -> bytes:
        rest, self.pending = self.pending, b""
        return rest


class Fetch:
    """The upstream half: connect to the checked address, send the request on, stream the response back."""

    def __init__(self, settings: NetworkSettings, upstream_tls: ssl.SSLContext,
                 injected: tuple[str, str] | None, secrets: tuple[bytes, ...] = ()) -> None:
        self.settings = settings
        self.upstream_tls = upstream_tls
        self.injected = injected
        self.secrets = secrets  # every credential the session adds, whole and each variable's value: masked

    async def __call__(self, exchange: Exchange) -> dict[str, Any]:
        started = time.perf_counter()
        target, rule = exchange.target, exchange.match.rule if exchange.match is not None else None
        timeout = self.settings.timeout
        checked = exchange.checked or await resolve_checked(
            target.host, target.port, rule.names_literally if rule is not None else (lambda _: False), timeout)
        reader, writer = await open_checked(checked, timeout)
        try:
            if target.scheme == "https":
                await writer.start_tls(self.upstream_tls, server_hostname=target.host.strip("[]"),
                                       ssl_handshake_timeout=timeout)
            limit = int(self.settings.response_limit_mb(rule) * (1 << 20)) if rule is not None else 0
            result = await self._exchange(exchange, reader, writer, limit)
        finally:
            writer.close()
        result["upstream"] = f"{checked.address}:{checked.port}"
        result["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
        return result

    def _request_headers(self, exchange: Exchange) -> list[tuple[str, str]]:
        target = exchange.target
        default = 443 if target.scheme == "https" else 80
        host = target.host if target.port == default else f"{target.host}:{target.port}"
        headers = [("Host", host)]
        dropped = {self.injected[0].lower()} if self.injected else set()
        if self.injected:  # a compressed body could hide the credential from the mask: ask for it plain
            dropped.add("accept-encoding")
            headers.append(("Accept-Encoding", "identity"))
        headers += [(k, v) for k, v in exchange.headers if k.lower() not in dropped and k.lower() != "content-length"]
        if exchange.body or exchange.method not in READ_METHODS:
            headers.append(("Content-Length", str(len(exchange.body))))
        if self.injected:
            headers.append(self.injected)  # after the decision, for this rule's requests only
        headers.append(("Connection", "close"))
        return headers

    async def _exchange(self, exchange: Exchange, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        limit: int) -> dict[str, Any]:
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 << 10)
        target = exchange.target
        path = target.path + (f"?{target.query}" if target.query else "")
        writer.write(conn.send(h11.Request(method=exchange.method, target=path,
                                           headers=self._request_headers(exchange))))
        if exchange.body:
            writer.write(conn.send(h11.Data(data=exchange.body)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        secrets, masker = self.secrets, Masker(self.secrets)
        timeout = self.settings.timeout
        digest, size, kept, cut = hashlib.sha256(), 0, bytearray(), None
        status, headers = 0, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                async with asyncio.timeout(timeout):
                    conn.receive_data(await reader.read(READ_BYTES))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                headers = [(k.decode("latin-1"), mask(v, secrets).decode("latin-1")) for k, v in event.headers
                           if k.decode("latin-1").lower() not in HOP_HEADERS]
                encoding = next((v for k, v in headers if k.lower() == "content-encoding"), "identity")
                if self.injected and encoding.lower() != "identity":
                    raise ResponseTooLarge(f"the response of {target.url()} is {encoding}-encoded though the gate "
                                           "asked for it plain: a credential added on the host could not be masked "
                                           "in it, so it was not sent on")
                length = next((int(v) for k, v in headers if k.lower() == "content-length" and v.isdigit()), None)
                if length is not None and limit and length > limit:
                    raise ResponseTooLarge(f"the response of {target.url()} is {length} bytes, over the limit of "
                                           f"{limit} bytes (max_response_mb); raise it for this rule if it is needed")
                await exchange.respond(status, headers, length)
                exchange.responded = True
            elif isinstance(event, h11.Data):
                chunk = masker.feed(bytes(event.data))
                if limit and size + len(chunk) > limit:
                    cut = (f"cut at {limit} bytes (max_response_mb): the rest of the response was not sent on")
                    exchange.abort()
                    break
                size += len(chunk)
                digest.update(chunk)
                if size <= RECORDED_BODY_BYTES:
                    kept += chunk
                await exchange.send_body(chunk)
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                rest = masker.end()
                if rest:
                    size += len(rest)
                    digest.update(rest)
                    if size <= RECORDED_BODY_BYTES:
                        kept += rest
                    await exchange.send_body(rest)
                await exchange.send_body(None)
                break
        result: dict[str, Any] = {"status": status, "headers": [list(h) for h in headers],
                                  "body_sha256": digest.hexdigest(), "body_bytes": size}
        if cut is not None:
            result["cut"] = cut
        elif size <= RECORDED_BODY_BYTES:
            result["body_b64"] = base64.b64encode(bytes(kept)).decode()
        return result
