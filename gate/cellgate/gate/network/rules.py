"""``[network]`` and its ``[[network.allow]]`` rules: which HTTP(S) requests of a cell the gate makes, decided purely.

Deny by default: the first rule whose ``url`` and ``methods`` match decides (``allow``, or ``approve``: a person is
asked). ``parse_target`` makes the sandbox's URL the ``Target`` matched, which is the URL the gate sends on. That
URL is hostile: a path climbing out of a prefix (``/v1/%2e%2e/x``, ``/v1/..%2fx``, ``/v1/..;/x``) is normalized
or refused first; hosts are lower-cased and IDNA-encoded, and IPv4 spellings other than four decimal parts
(``127.1``, ``0x7f.0.0.1``) refused, so a pattern meets the one host the gate connects to; user info
(``https://api.example.com@evil.com/``) is refused (RFC 9110 4.2.4). A credential (``inject``) is bound to HTTPS
and named hosts. Which resolved addresses may be reached is ``addresses``' to say (``NetworkRule.names_literally``).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote

from pydantic import Field, ValidationInfo, field_validator

from cellgate.gate._model import StrictModel

DEFAULT_PORTS: Mapping[str, int] = {"http": 80, "https": 443}
# What a rule may name. TRACE echoes the request (an injected credential with it) and CONNECT is the tunnel
# itself, not a request: neither is forwarded, and "*" does not cover them.
METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "QUERY", "PROPFIND", "PROPPATCH", "MKCOL",
           "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH")
# Headers that frame the message or belong to one hop: the gate sets them itself, an inject never does.
FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
                     "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"})
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(?:\?([^#]*))?(?:#.*)?$", re.DOTALL)
_PATTERN = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)(/[^?#]*)?$", re.DOTALL)
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_BAD_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``text`` spells (brackets allowed; an IPv4-mapped IPv6 address as its IPv4), or None."""
    try:
        address = ipaddress.ip_address(text.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    return (address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None) or address


def normalize_host(host: str) -> str:
    """A host as the gate compares and connects to it: lower-case, IDNA, an IP address in its one spelling
    (IPv6 without brackets). Raises ValueError saying what is wrong."""
    if host.startswith("["):
        if not host.endswith("]") or "%" in host:
            raise ValueError(f"host {host!r} is not an IPv6 address in brackets (zone ids are not supported)")
        try:
            return ipaddress.IPv6Address(host[1:-1]).compressed
        except ValueError:
            raise ValueError(f"host {host!r} is not an IPv6 address") from None
    name = host.removesuffix(".")
    if not name.isascii():
        import idna  # only for a name that needs it

        try:
            name = idna.encode(name, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise ValueError(f"host {host!r} is not a valid internationalized name ({exc})") from None
    name = name.lower()
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"host {host!r} is not a host name (letters, digits, '-' in labels of 1 to 63, "
                         "separated by '.')")
    if labels[-1].isdigit() or labels[-1].startswith("0x"):  # the forms inet_aton reads as an IPv4 address
        try:
            return str(ipaddress.IPv4Address(name))
        except ValueError:
            raise ValueError(f"host {host!r} is not an IPv4 address in four decimal parts (like 127.0.0.1) "
                             "nor a name; write the address in full") from None
    return name


def _split_authority(authority: str, what: str) -> tuple[str, int | None]:
    """'host:port' -> (host as written, port or None)."""
    if not authority or any(c in authority for c in "@%\\"):
        raise ValueError(f"{what}: no host, or a host with '@', '%' or '\\' in it")
    match = re.fullmatch(r"(\[[^\]]*\]|[^:\[\]]*)(?::(\d*))?", authority)
    if not match:
        raise ValueError(f"{what}: {authority!r} is not host[:port] (an IPv6 address goes in brackets: [::1]:8080)")
    host, port = match.group(1), match.group(2) or ""
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{what}: port {port!r} is not a number from 1 to 65535")
    return host, int(port) if port else None


def _normalize_escapes(path: str, what: str) -> str:
    """Percent escapes of unreserved characters decoded (``%2e`` -> ``.``, ``%7E`` -> ``~``), the rest upper-case."""
    if _BAD_PCT.search(path):
        raise ValueError(f"{what}: a '%' that does not start an escape like %2F; write a literal '%' as %25")
    if "\\" in path:
        raise ValueError(f"{what}: a backslash in the path (some servers read it as '/'); write it as %5C")
    path = re.sub(r"[^\x00-\x7f]", lambda m: quote(m.group()), path)  # as a client sends it: UTF-8, escaped
    return _PCT.sub(lambda m: c if (c := chr(int(m.group(1), 16))) in _UNRESERVED else "%" + m.group(1).upper(), path)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 on an absolute path: '/a/b/../c' -> '/a/c', '/a/.' -> '/a/'."""
    kept: list[str] = []
    segments = path.split("/")[1:]
    for index, segment in enumerate(segments):
        if segment in (".", ".."):
            if segment == ".." and kept:
                kept.pop()
            if index == len(segments) - 1:
                kept.append("")
        else:
            kept.append(segment)
    return "/" + "/".join(kept)


def _hides_dots(segment: str) -> bool:
    """Whether a server that decodes further (``%2F``, ``%252e``, ``\\``, ``;params``) would read a dot segment here."""
    text = segment
    while (decoded := unquote(text)) != text:  # each pass that changes it makes it shorter: it ends
        text = decoded
    return any(piece.split(";")[0] in (".", "..") for piece in re.split(r"[/\\]", text))


def normalize_path(path: str, what: str) -> str:
    """The path matched and sent on: escapes normalized, dot segments removed; an ambiguous one refused."""
    path = _remove_dot_segments(_normalize_escapes(path or "/", what))
    for segment in path.split("/"):
        if _hides_dots(segment):
            raise ValueError(f"{what}: path segment {segment!r} is a '.' or '..' to a server that decodes it further "
                             "(an encoded '/', a double escape or ';' parameters); write the path plainly")
    return path


@dataclass(frozen=True)
class Target:
    """A request's URL as the gate matches and sends it: host normalized, default port filled in, path normalized."""

    scheme: str
    host: str
    port: int
    path: str
    query: str

    def url(self, query: bool = True) -> str:
        port = "" if self.port == DEFAULT_PORTS[self.scheme] else f":{self.port}"
        tail = f"?{self.query}" if query and self.query else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}{port}{self.path}{tail}"


def parse_target(url: str) -> Target:
    """An absolute http(s) URL as a ``Target`` (the fragment dropped); ValueError naming the URL and the problem."""
    what = f"URL {url!r}"
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise ValueError(f"{what}: contains a space or a control character; percent-encode it")
    match = _URL.match(url)
    if not match:
        raise ValueError(f"{what}: not an absolute URL like https://api.example.com/v1/items")
    scheme, authority, path, query = match.group(1).lower(), match.group(2), match.group(3), match.group(4) or ""
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"{what}: scheme {scheme!r}; the gate forwards only http and https")
    if "@" in authority:  # RFC 9110 4.2.4: an error, never a credential to pass on nor a host to guess
        raise ValueError(f"{what}: has user info before '@', so its host is {authority.rsplit('@', 1)[1]!r}, not "
                         "what precedes the '@'; the gate takes no credentials in URLs (send a header, or inject)")
    host, port = _split_authority(authority, what)
    query = re.sub(r"[^\x00-\x7f]", lambda m: quote(m.group()), query)
    try:
        host = normalize_host(host)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    return Target(scheme, host, port or DEFAULT_PORTS[scheme], normalize_path(path, what), query)


@dataclass(frozen=True)
class _Pattern:
    scheme: str
    host: str  # "*", "*.example.com" or a normalized host
    port: int
    path: re.Pattern[str]

    @classmethod
    def parse(cls, text: str) -> _Pattern:
        match = _PATTERN.match(text)
        if not match or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in text):
            raise ValueError("must look like https://api.example.com/v1/* (scheme://host[:port][/path]: no query)")
        scheme, authority, path = match.group(1).lower(), match.group(2), match.group(3)
        if scheme not in DEFAULT_PORTS:
            raise ValueError(f"scheme {scheme!r}: the gate forwards only http and https")
        host, port = _split_authority(authority, "the pattern")
        return cls(scheme, _pattern_host(host), port or DEFAULT_PORTS[scheme], _path_regex(path))

    def reaches(self, scheme: str, host: str, port: int) -> bool:
        if (scheme, port) != (self.scheme, self.port):
            return False
        if self.host.startswith("*."):  # one or more labels below the domain; never the domain, never an address
            return host.endswith(self.host[1:]) and _ip(host) is None
        return self.host in ("*", host)

    def matches(self, target: Target) -> bool:
        return self.reaches(target.scheme, target.host, target.port) and bool(self.path.fullmatch(target.path))


def _pattern_host(host: str) -> str:
    wild, name = host.startswith("*."), host.removeprefix("*.")
    if host != "*" and "*" in name:
        raise ValueError(f"host {host!r}: a wildcard is only a leading '*.' label (*.example.com) or the host '*'")
    if wild and _ip(normalize_host(name)) is not None:
        raise ValueError(f"host {host!r}: '*.' goes before a domain name, never an address")
    return host if host == "*" else "*." * wild + normalize_host(name)


def _path_regex(path: str | None) -> re.Pattern[str]:
    if not path:
        return re.compile(r".*", re.DOTALL)
    pieces = _normalize_escapes(path, "the pattern's path").split("*")
    if any(segment in (".", "..") for segment in "x".join(pieces).split("/")):
        raise ValueError(f"path {path!r}: write it without '.' or '..' segments (a request's path has none)")
    return re.compile(".*".join(re.escape(piece) for piece in pieces), re.DOTALL)


class Inject(StrictModel):
    """A header the gate adds on the host after a rule allowed the request: ``value`` names environment variables
    of the gate's process as ``${NAME}``; the sandbox never sees what they hold."""

    header: str = Field(description="the header's name, e.g. Authorization")
    value: str = Field(description='its value, with ${NAME} for each environment variable: "Bearer ${API_TOKEN}"')

    @field_validator("header")
    @classmethod
    def _header(cls, name: str) -> str:
        if not TOKEN.match(name):
            raise ValueError("is not a header name (letters, digits and !#$%&'*+.^_`|~-)")
        if name.lower() in FRAMING:
            raise ValueError("is a header the gate sets itself (it frames the message or one hop); inject another")
        return name

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        if any(ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F for c in value):
            raise ValueError("holds a line break or a control character")
        if "$" in _PLACEHOLDER.sub("", value):
            raise ValueError("has a '$' that does not start ${NAME}: write each variable as ${NAME}")
        names = _PLACEHOLDER.findall(value)
        if not names:
            raise ValueError("names no environment variable: write the secret's variable as ${NAME} "
                             '(value = "Bearer ${API_TOKEN}"), never the secret itself')
        for name in (n for n in names if not ENV_NAME.match(n)):
            raise ValueError(f"${{{name}}} is not an environment variable name (A-Z, 0-9, _; no digit first)")
        return value

    def env_names(self) -> list[str]:
        """The environment variables the value uses, in order, each once."""
        return list(dict.fromkeys(_PLACEHOLDER.findall(self.value)))

    def resolve(self, environ: Mapping[str, str], rule: str = "") -> str:
        """The value with each ``${NAME}`` filled from ``environ``; ValueError naming the variable and ``rule``
        (e.g. network.allow[2]) when one is unset or empty."""
        who = rule or f"the [[network.allow]] rule that injects {self.header}"
        for name in self.env_names():
            if not environ.get(name):
                said = "is empty" if name in environ else "is not set"
                raise ValueError(f"{who} injects header {self.header} from ${{{name}}}, but {name} {said} in the "
                                 "gate's environment; set it where the gate runs (never inside the sandbox)")
        resolved = _PLACEHOLDER.sub(lambda m: environ[m.group(1)], self.value)
        if any(c in resolved for c in "\r\n\0"):
            raise ValueError(f"{who} injects header {self.header}, but {', '.join(self.env_names())} holds a line "
                             "break or NUL, which a header cannot carry")
        return resolved


class NetworkRule(StrictModel):
    """One ``[[network.allow]]``: the requests it lets through and how."""

    url: str = Field(description="scheme://host[:port][/path]: '*.' before a domain (its subdomains), '*' as the "
                     "host (any), '*' in the path (any characters, '/' too); no path: every path")
    methods: list[str] = Field(default_factory=lambda: ["GET", "HEAD"],
                               description=f"methods allowed, or [\"*\"] for any of {', '.join(METHODS)}")
    decision: Literal["allow", "approve"] = "allow"
    inject: Inject | None = None
    max_response_mb: float | None = Field(default=None, gt=0, description="default: [network] max_response_mb")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        _Pattern.parse(url)
        return url

    @field_validator("methods")
    @classmethod
    def _methods(cls, methods: list[str]) -> list[str]:
        upper = list(dict.fromkeys(m.upper() for m in methods))
        if not upper:
            raise ValueError('allows no method; list some, e.g. ["GET", "HEAD"], or ["*"] for any')
        for unknown in (m for m in upper if m not in METHODS and m != "*"):
            raise ValueError(f"{unknown!r} is not a method the gate forwards; use {', '.join(METHODS)} or \"*\"")
        return ["*"] if "*" in upper else upper

    @field_validator("inject")
    @classmethod
    def _inject_bound(cls, inject: Inject | None, info: ValidationInfo) -> Inject | None:
        url = info.data.get("url")  # absent when the url was refused: that error is said already
        if inject is None or url is None:
            return inject
        pattern = _Pattern.parse(url)
        if pattern.scheme != "https":
            raise ValueError(f"on {url} (http) would send the credential in clear text: only https:// rules inject")
        if pattern.host == "*" or pattern.host.startswith("*.") and pattern.host.count(".") < 2:  # '*', '*.com'
            raise ValueError(f"on {url} would hand the credential to hosts nobody named; name its hosts in the url")
        return inject

    @functools.cached_property
    def _pattern(self) -> _Pattern:
        return _Pattern.parse(self.url)

    def matches_url(self, target: Target) -> bool:
        return self._pattern.matches(target)

    def allows(self, method: str) -> bool:
        return method in METHODS and ("*" in self.methods or method in self.methods)

    def names_literally(self, address: str) -> bool:
        """Whether the pattern's host is exactly this IP address (no wildcard): only then may the gate connect to a
        private or loopback address."""
        named, given = _ip(self._pattern.host), _ip(address)
        return named is not None and named == given


class NetworkSettings(StrictModel):
    """``[network]``: the requests a cell's own HTTP clients may make through the gate (none, by default)."""

    upstream_ca: str | None = Field(default=None, description="PEM file of CA certificates trusted for upstreams "
                                    "besides the host's store (relative to cellgate.toml's folder)")
    max_request_mb: float = Field(default=10, gt=0, description="the largest request body sent on")
    max_response_mb: float = Field(default=100, gt=0, description="the largest response body; longer is cut")
    timeout: float = Field(default=30, gt=0, description="seconds for an upstream to connect and answer")
    allow: list[NetworkRule] = Field(default_factory=list, description="[[network.allow]] rules, first match wins")

    def response_limit_mb(self, rule: NetworkRule) -> float:
        return rule.max_response_mb if rule.max_response_mb is not None else self.max_response_mb


@dataclass(frozen=True)
class Match:
    index: int
    rule: NetworkRule

    @property
    def label(self) -> str:
        return f"network.allow[{self.index}]"

    def injected(self, environ: Mapping[str, str]) -> tuple[str, str] | None:
        """The header to add (name, value), or None; ValueError when its variable is unset."""
        inject = self.rule.inject
        return None if inject is None else (inject.header, inject.resolve(environ, self.label))


@dataclass(frozen=True)
class NoMatch:
    reason: str
    suggestion: str  # TOML that allows exactly this request's method under its path, or "" when none can


def decide(settings: NetworkSettings, method: str, target: Target) -> Match | NoMatch:
    """The first rule matching the URL and the method, or why none does and what would allow it."""
    if method not in METHODS:
        said = f"; methods are upper-case: {method.upper()}" if method.upper() in METHODS else ""
        return NoMatch(f"method {method!r} is not one the gate forwards ({', '.join(METHODS)}){said}", "")
    other = None
    for index, rule in enumerate(settings.allow):
        if rule.matches_url(target):
            if rule.allows(method):
                return Match(index, rule)
            other = other or (index, rule)
    url = target.url(query=False)
    reason = (f"no [[network.allow]] rule matches {url}" if other is None else
              f"network.allow[{other[0]}] matches {url} but allows only {', '.join(other[1].methods)}, not {method}")
    # What a person adds to allow this method on this path and below.
    add = f"[[network.allow]]\nurl = {json.dumps(url + '*')}\nmethods = [{json.dumps(method)}]"
    return NoMatch(reason, add)


def may_reach(settings: NetworkSettings, scheme: str, host: str, port: int) -> bool:
    """Whether any rule could match some path on this host and port (a CONNECT is refused before TLS if not)."""
    try:
        normalized = normalize_host(host)
    except ValueError:
        return False
    return any(rule._pattern.reaches(scheme.lower(), normalized, port) for rule in settings.allow)
