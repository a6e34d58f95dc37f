"""The proxy the sandbox's clients talk to: one client connection, read request by request, each a gated call.

A client asks in one of two ways: ``CONNECT host:port`` (HTTPS), refused with a 403 before any TLS unless some
rule could match that host and port, then TLS terminated here with a leaf of the session's CA (``certs``); or a
plain request in absolute form (``GET http://host/path``). Each request is read whole (its body up to
``[network] max_request_mb``), decided by the first ``[[network.allow]]`` rule that matches (``rules``), and served
by the dispatcher as the call ``http`` (``exchange``): budgets, rates, approvals and the record are the tool
calls'. A refusal is an HTTP answer that says why: the status, ``X-Cellgate-Refused`` and a short text body naming
the rule, or saying no rule matched and what to add. Keep-alive works; a WebSocket upgrade is refused.
"""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import h11

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.calls.protocol import CallReply, CallRequest
from cellgate.gate.network.addresses import AddressRefused, resolve_checked
from cellgate.gate.network.certs import SessionCA, upstream_context
from cellgate.gate.network.exchange import HOP_HEADERS, TEMPLATE, Exchange, Fetch, http_tool
from cellgate.gate.network.rules import Match, NetworkSettings, NoMatch, decide, may_reach, parse_target

READ_BYTES: Final = 256 << 10
REFUSED_HEADER: Final = "X-Cellgate-Refused"
EMPTY_SHA256: Final = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
MIN_SECRET_CHARS: Final = 4  # a variable's value shorter than this is masked only as part of its whole header
# A call's error kind, as the HTTP status the client gets.
STATUS_OF: Final = {"denied": 403, "budget": 429, "rate_limited": 429, "timeout": 504, "busy": 503,
                    "no_cell": 403, "unavailable": 503, "failed": 502, "invalid": 400, "outcome_unknown": 409,
                    "divergence": 502}
# Who the proxy is talking to: the call's scope (the running cell), or None when no cell runs.
ScopeNow = Callable[[], tuple[CallScope, Callable[[Any], None]] | None]
# Makes what serves one allowed request (given the credential its rule adds, if any): called with the Exchange,
# it answers the client through the exchange's respond/send_body and returns the call's result.
Fetcher = Callable[[tuple[str, str] | None], Callable[[Exchange], Awaitable[dict[str, Any]]]]


class Refusal(Exception):
    def __init__(self, status: int, reason: str, text: str = "") -> None:
        super().__init__(reason)
        self.status, self.reason, self.text = status, reason, text or reason


class NetworkGate:
    """The session's network: its rules, its CA, its upstream trust, and the credentials it adds."""

    def __init__(self, settings: NetworkSettings, ca: SessionCA, dispatcher: Dispatcher,
                 environ: Mapping[str, str] = os.environ, fetcher: Fetcher | None = None) -> None:
        self.settings, self.ca, self.dispatcher = settings, ca, dispatcher
        self.upstream_tls = upstream_context(settings.upstream_ca)
        # What answers an allowed request: the upstream (``exchange.Fetch``), or a replay's record.
        self.fetcher: Fetcher = fetcher or (
            lambda injected: Fetch(self.settings, self.upstream_tls, injected, tuple(s.encode() for s in self.secrets)))
        dispatcher.tool_added(TEMPLATE)
        entry = dispatcher.policy.tools.get(TEMPLATE.name)
        if entry is not None and (entry.decision is not None or entry.rules):
            raise ConfigError("[policy.tools.http] sets a decision or rules, but requests of the network are decided "
                              "by [[network.allow]] (deny by default); keep only its rate, budgets or concurrency "
                              "there and write the decisions as [[network.allow]] rules")
        self.injected: dict[int, tuple[str, str]] = {}  # by rule index: (header, value), resolved at the start
        self.replaying = dispatcher.answers_from_record  # every request answered from the record, none sent
        self.secrets: list[str] = []  # each added header's value, and each variable's value in it
        for index, rule in enumerate(settings.allow if not self.replaying else ()):
            try:
                injected = Match(index, rule).injected(environ)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            if injected is None or rule.inject is None:
                continue
            self.injected[index] = injected
            parts = [injected[1], *(environ[name] for name in rule.inject.env_names())]
            for part in parts:
                if len(part) >= MIN_SECRET_CHARS and part not in self.secrets:
                    self.secrets.append(part)
                    dispatcher.secrets.add(part, f"network.allow[{index}] {injected[0]}")
        self.secrets.sort(key=len, reverse=True)  # the whole value masked before a part of it

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scope_now: ScopeNow) -> None:
        """One client connection, until it closes (or a refusal closes it)."""
        client = _Client(reader, writer)
        try:
            request = await client.next_request()
            if request is None:
                return
            if request.method == b"CONNECT":
                host, port = _authority(request.target.decode("latin-1"))
                if not self.replaying and not may_reach(self.settings, "https", host, port):
                    await self._recorded_refusal("CONNECT", f"https://{host}:{port}/", [], scope_now,
                                                 f"no [[network.allow]] rule reaches https://{host}:{port}")
                    raise Refusal(403, f"no [[network.allow]] rule reaches https://{host}:{port}",
                                  f"cellgate: no [[network.allow]] rule reaches https://{host}:{port}; to allow it, "
                                  f"add to cellgate.toml:\n\n[[network.allow]]\nurl = \"https://{host}:{port}/*\"\n")
                await client.switch()
                await writer.start_tls(self.ca.server_context(host))
                client = _Client(reader, writer)
                origin: tuple[str, int] | None = (host, port)
                request = await client.next_request()
            else:
                origin = None
            while request is not None:
                await self._one(client, request, origin, scope_now)
                if not client.next_cycle():
                    return
                request = await client.next_request()
        except Refusal as refusal:
            await client.refuse(refusal)
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError, OSError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _one(self, client: _Client, request: h11.Request, origin: tuple[str, int] | None,
                   scope_now: ScopeNow) -> None:
        method = request.method.decode("latin-1")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers]
        raw = request.target.decode("latin-1")
        try:
            url = self._url(raw, headers, origin)
            target = parse_target(url)
        except (Refusal, ValueError) as exc:
            refusal = exc if isinstance(exc, Refusal) else Refusal(400, str(exc))
            asked = raw if origin is None else f"https://{origin[0]}:{origin[1]} {raw}"
            await self._recorded_refusal(method, asked, headers, scope_now, refusal.reason)
            raise refusal from None
        if any(k.lower() == "upgrade" for k, _ in headers):
            reason = "a connection upgrade (WebSocket) is not carried by the gate"
            await self._recorded_refusal(method, url, headers, scope_now, reason)
            raise Refusal(403, reason, "cellgate: the gate carries HTTP requests, not WebSocket or other upgraded "
                                       "connections")
        limit = int(self.settings.max_request_mb * (1 << 20))
        try:
            body = await client.body(limit)
        except Refusal as refusal:
            await self._recorded_refusal(method, url, headers, scope_now, refusal.reason)
            raise
        decided = decide(self.settings, method, target)
        match = decided if isinstance(decided, Match) else None
        injected = self.injected.get(match.index) if match is not None else None
        exchange = Exchange(method, target, [(k, v) for k, v in headers if k.lower() not in HOP_HEADERS], body, match,
                            refused=decided.reason if isinstance(decided, NoMatch) else None)
        carried = self._carries_a_credential(url, headers, body)
        scoped = scope_now()
        if scoped is None:
            raise Refusal(403, "no cell of this session is running", "cellgate: a request is allowed only while "
                          "a cell runs (the gate's authority is scoped to a cell)")
        scope, counted = scoped
        if carried is not None:
            exchange.headers = [(k, "*" * len(v) if carried in v else v) for k, v in exchange.headers]
            decision, match = "deny", None
            exchange.match, exchange.refused = None, "the request carries a credential the gate adds itself"
        else:
            decision = match.rule.decision if match is not None else "deny"
        if match is not None and decision != "deny" and not self.replaying:
            try:  # resolved once, here: the fetch connects to this address
                exchange.checked = await resolve_checked(target.host, target.port, match.rule.names_literally,
                                                         self.settings.timeout)
            except AddressRefused as exc:
                decision, exchange.refused = "deny", str(exc)
        fetch = self.fetcher(injected)
        client.attach(exchange)

        async def run(**_: Any) -> dict[str, Any]:
            return await fetch(exchange)

        call = CallRequest(id=uuid.uuid4().hex, tool="http", args=exchange.args())
        refused = self.dispatcher.admit(call, scope)
        if refused is not None:
            counted(refused.refusal)
            raise Refusal(STATUS_OF.get(str((refused.reply.error or {}).get("kind")), 403),
                          str((refused.reply.error or {}).get("message")))
        outcome = await self.dispatcher.serve(call, scope, tool=exchange.tool(decision, run))
        counted(outcome.refusal)
        if exchange.responded:
            if not outcome.reply.ok:  # the fetch failed after the response began: the client sees it end early
                client.abort()
            return
        await self._answer(client, exchange, outcome.reply, decided, carried)

    async def _recorded_refusal(self, method: str, url: str, headers: list[tuple[str, str]], scope_now: ScopeNow,
                                reason: str) -> None:
        """A request refused before it could be decided is still a denied call ``http`` in the record (when a cell
        runs: outside one, the gate's authority is none, and nothing is asked)."""
        scoped = scope_now()
        if scoped is None:
            return
        scope, counted = scoped
        try:
            args = Exchange(method, parse_target(url), [(k, v) for k, v in headers if k.lower() not in HOP_HEADERS],
                            b"", None, refused=reason).args()
        except ValueError:  # not a URL at all: what was asked, as it was asked
            args = {"method": method[:32], "url": url[:2000], "headers": [], "body_sha256": EMPTY_SHA256,
                    "body_bytes": 0, "rule": None, "refused": reason}
        call = CallRequest(id=uuid.uuid4().hex, tool="http", args=args)
        if self.dispatcher.admit(call, scope) is not None:
            return

        async def never(**_: Any) -> dict[str, Any]:  # pragma: no cover - a denied call is never run
            raise AssertionError("a refused request was run")

        outcome = await self.dispatcher.serve(call, scope, tool=http_tool(method, "deny", never, reason))
        counted(outcome.refusal)

    def _url(self, target: str, headers: list[tuple[str, str]], origin: tuple[str, int] | None) -> str:
        if origin is None:
            if not target.startswith(("http://", "https://")):
                raise Refusal(400, f"the request target {target[:200]!r} is not an absolute http(s) URL",
                              "cellgate: send requests through the proxy in absolute form (http://host/path), "
                              "or use CONNECT for https")
            return target
        host, port = origin
        claimed = next((v for k, v in headers if k.lower() == "host"), "")
        if claimed and _authority(claimed, 443)[0] != host:
            raise Refusal(421, f"the Host header {claimed[:200]!r} is not the host {host!r} the tunnel was opened to")
        if not target.startswith("/"):
            raise Refusal(400, f"the request target {target[:200]!r} inside the tunnel is not a path")
        return f"https://{host}:{port}{target}" if port != 443 else f"https://{host}{target}"

    def _carries_a_credential(self, url: str, headers: list[tuple[str, str]], body: bytes) -> str | None:
        """The gate's own credential, if the sandbox somehow sends one (it never sees them): refused."""
        for value in self.secrets:
            if value in url or any(value in v for _, v in headers) or value.encode() in body:
                return value
        return None

    async def _answer(self, client: _Client, exchange: Exchange, reply: CallReply, decided: Match | NoMatch,
                      carried: str | None) -> None:
        if reply.planned:  # a plan's fork lists a write, never sends it (``calls.plans``)
            raise Refusal(202, "planned: this write request is listed in the plan, not sent",
                          "cellgate: this request is a write in a plan; it is sent when the plan is applied")
        if reply.ok and isinstance(reply.result, dict):  # answered from the record (a retry's committed write)
            result = reply.result
            if "body_b64" not in result:
                raise Refusal(502, "the record does not keep this response's body (it was over 8 MB, or cut), so it "
                                   "cannot be answered from the record")
            body = base64.b64decode(result.get("body_b64", ""))
            await client.respond(int(result.get("status", 502)), [tuple(h) for h in result.get("headers", [])],
                                 len(body))
            await client.send_body(body or None)
            if body:
                await client.send_body(None)
            return
        error = reply.error or {}
        kind, message = str(error.get("kind")), str(error.get("message"))
        if carried is not None:
            raise Refusal(403, "the request carries a credential the gate adds itself",
                          "cellgate: this request carries the value of a credential the gate adds on the host; "
                          "the sandbox never holds it, so the request was refused")
        if kind == "denied" and exchange.refused is not None and isinstance(decided, Match):
            raise Refusal(403, exchange.refused)
        if kind == "denied" and isinstance(decided, NoMatch):
            raise Refusal(403, decided.reason, f"cellgate: {decided.reason}" + (
                f"; to allow it, add to cellgate.toml:\n\n{decided.suggestion}\n" if decided.suggestion else "\n"))
        if kind == "denied" and isinstance(decided, Match):
            raise Refusal(403, f"{decided.label} asks for approval and it was not given: {message}")
        if "ResponseTooLarge" in message or "AddressRefused" in message:
            raise Refusal(502, message.split(": ", 2)[-1])
        raise Refusal(STATUS_OF.get(kind, 502), message)


def _authority(text: str, default: int = 443) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        host, port = text, str(default)
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise Refusal(400, f"{text[:200]!r} is not host:port")
    return host.strip("[]").lower(), int(port)


class _Client:
    """The client's side of one connection, as h11 reads and writes it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 << 10)

    async def _event(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(await self.reader.read(READ_BYTES))

    async def next_request(self) -> h11.Request | None:
        event = await self._event()
        return event if isinstance(event, h11.Request) else None

    async def body(self, limit: int) -> bytes:
        data = bytearray()
        while True:
            event = await self._event()
            if isinstance(event, h11.Data):
                data += event.data
                if len(data) > limit:
                    raise Refusal(413, f"the request body is over {limit} bytes ([network] max_request_mb)")
            elif isinstance(event, h11.EndOfMessage) or event is h11.PAUSED:
                return bytes(data)
            else:
                raise ConnectionError("the client went away")

    async def switch(self) -> None:
        """Answer a CONNECT: the bytes after it are the client's TLS."""
        await self.body(0)
        self.writer.write(self.conn.send(h11.Response(status_code=200, headers=[], reason=b"Connection established")))
        await self.writer.drain()
        if self.conn.trailing_data[0]:
            raise ConnectionError("the client sent bytes before the tunnel was answered")

    def attach(self, exchange: Exchange) -> None:
        exchange.respond, exchange.send_body, exchange.abort = self.respond, self.send_body, self.abort

    async def respond(self, status: int, headers: list[tuple[str, str]] | list[Any], length: int | None) -> None:
        kept = [(k, v) for k, v in headers if k.lower() != "content-length"]
        if length is not None:
            kept.append(("Content-Length", str(length)))
        self.writer.write(self.conn.send(h11.Response(status_code=status, headers=kept)))

    async def send_body(self, chunk: bytes | None) -> None:
        self.writer.write(self.conn.send(h11.EndOfMessage() if chunk is None else h11.Data(data=chunk)))
        await self.writer.drain()

    def abort(self) -> None:
        self.writer.transport.abort()

    async def refuse(self, refusal: Refusal) -> None:
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE) or self.writer.is_closing():
            return
        body = refusal.text.encode("utf-8", "replace")
        reason = " ".join(refusal.reason.split())[:300].encode("latin-1", "replace").decode("latin-1")
        try:
            self.writer.write(self.conn.send(h11.Response(status_code=refusal.status, headers=[
                (REFUSED_HEADER, reason), ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))), ("Connection", "close")])))
            self.writer.write(self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage()))
            await self.writer.drain()
        except (h11.LocalProtocolError, ConnectionError, OSError):
            pass

    def next_cycle(self) -> bool:
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
            self.conn.start_next_cycle()
            return True
        return False
