"""Where the gate may connect: the host resolves a name once, checks every answer, and connects to that address.

The threat is a confused deputy (SECURITY.md N8): a URL whose host is, or resolves to, what only the host reaches (its
loopback: the Jupyter server, this gate; the cloud metadata address; the private network; its own interfaces). A name
with ANY forbidden answer is refused whole (mixing public and private answers is a rebinding trick), and the
connection goes to the checked address as a numeric literal (no second resolution to answer differently). Only a rule
naming a forbidden address literally reaches it: a name never does, so a wildcard never opens the deny set. An IPv6
address embedding an IPv4 one (mapped, compatible, 6to4, NAT64) is checked as that IPv4 address too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cellgate.gate._errors import CellgateError

__all__ = ["AddressRefused", "Checked", "forbidden_category", "open_checked", "own_addresses", "resolve_checked"]

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_N = ipaddress.ip_network

# Checked in order, after "unspecified", "loopback" and the host's own addresses; the first match names the category.
_FORBIDDEN = (
    ("broadcast", (_N("255.255.255.255/32"),)),
    ("this network (RFC 1122)", (_N("0.0.0.0/8"),)),
    ("private (RFC 1918)", (_N("10.0.0.0/8"), _N("172.16.0.0/12"), _N("192.168.0.0/16"))),
    ("shared (CGNAT, RFC 6598)", (_N("100.64.0.0/10"),)),
    ("link-local (cloud metadata)", (_N("169.254.0.0/16"), _N("fe80::/10"))),
    ("unique local (ULA)", (_N("fc00::/7"), _N("fec0::/10"))),  # fec0::/10: the deprecated site-local
    ("multicast", (_N("224.0.0.0/4"), _N("ff00::/8"))),
    ("documentation/benchmark", (_N("192.0.2.0/24"), _N("198.51.100.0/24"), _N("203.0.113.0/24"),
                                 _N("198.18.0.0/15"), _N("2001:db8::/32"), _N("3fff::/20"), _N("2001:2::/48"))),
    ("reserved", (_N("192.0.0.0/24"), _N("192.88.99.0/24"), _N("240.0.0.0/4"), _N("100::/64"),
                  _N("2001::/23"))),  # 2001::/23: IETF assignments, Teredo among them (its IPv4 is obfuscated)
)
_NAT64 = (_N("64:ff9b::/96"), _N("64:ff9b:1::/48"))
_GLOBAL_UNICAST_V6 = _N("2000::/3")  # every other IPv6 address is unassigned or special: refused as reserved
# A name ending in a number is an IPv4 address in another spelling (2130706433, 0x7f.1, 010.0.0.1): refused.
_NUMERIC_LAST_LABEL = re.compile(r"(?:^|\.)(?:0x[0-9a-f]*|[0-9]+)\.?$", re.IGNORECASE)


class AddressRefused(CellgateError):
    """The gate does not connect to this host: its address is forbidden, or its name did not resolve."""
    code: Literal["address-refused"] = "address-refused"

    def __init__(self, message: str, *, host: str, address: str, category: str) -> None:
        super().__init__(message)
        self.host, self.address, self.category = host, address, category


@dataclass(frozen=True)
class Checked:
    """A host as the gate checked it: the one address it connects to; ``literal`` when the host was that address."""
    host: str
    address: IP
    port: int
    literal: bool


def _unscoped(ip: IP) -> IP:
    return ipaddress.IPv6Address(int(ip)) if isinstance(ip, ipaddress.IPv6Address) else ip


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:  # 2002:a.b.c.d::/48
        return ip.sixtofour
    if int(ip) >> 32 in (0, 0xFFFF0000) or any(ip in net for net in _NAT64):  # compatible, SIIT, NAT64: last 32
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def forbidden_category(ip: IP, own: frozenset[IP] | None = None) -> str | None:
    """None for a public address, else why the gate never connects there (``own``: the host's, by default)."""
    ip = _unscoped(ip)
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip in (own_addresses() if own is None else own):
        return "the host's own address"
    for category, networks in _FORBIDDEN:
        if any(ip in net for net in networks):
            return category
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            found = forbidden_category(inner, own)
            return None if found is None else f"{found} (embedded IPv4)"
        if ip not in _GLOBAL_UNICAST_V6:
            return "reserved"
    return None


def _interface_addresses() -> frozenset[IP]:
    # Linux's own lists, so the gate needs no library: IPv4 addresses are the fib trie's "/32 host LOCAL" leaves,
    # IPv6 ones the rows of if_inet6 (32 hex digits each), read in the gate's network namespace (its view counts).
    found: set[IP] = set()
    leaf = None
    try:
        for line in Path("/proc/net/fib_trie").read_text().splitlines():
            if line.strip().startswith("|--"):
                leaf = line.split()[-1]
            elif leaf is not None and line.strip() == "/32 host LOCAL":
                found.add(ipaddress.IPv4Address(leaf))
        rows = Path("/proc/net/if_inet6").read_text().splitlines()
        found.update(ipaddress.IPv6Address(int(row[:32], 16)) for row in rows)
    except OSError:
        pass  # no IPv6 (no if_inet6), or not Linux, where the gate's sandbox (runsc) does not run either
    return frozenset(found)


_own: tuple[float, frozenset[IP]] | None = None


def own_addresses() -> frozenset[IP]:
    """The host's own interface addresses, read at most once every 60 s (an address added later counts then)."""
    global _own
    now = time.monotonic()
    if _own is None or now - _own[0] >= 60.0:
        _own = (now, _interface_addresses())
    return _own[1]


def _literal(host: str) -> IP | None:
    try:  # [v6] as a URL writes it, or bare
        return ipaddress.ip_address(host[1:-1] if host[:1] + host[-1:] == "[]" else host)
    except ValueError:
        return None


def _refused(host: str, ip: IP, category: str, literal: bool) -> AddressRefused:
    where = f"the address {ip}" if literal else f"the name {host!r} resolves to {ip}"
    fix = (f"add a [[network.allow]] rule whose url names {ip} literally to reach it" if literal else
           f"a name never reaches it, not even through a rule naming the name; only a [[network.allow]] rule whose "
           f"url names {ip} literally does")
    if category.startswith("link-local"):  # never invite an operator to open the cloud metadata service
        fix = ("link-local addresses hold cloud metadata services, whose credentials a cell must never reach; "
               "give the cell a tool instead if it needs something from there")
    return AddressRefused(f"{where} ({category}): the gate never connects there; {fix}",
                          host=host, address=str(ip), category=category)


def _unresolved(host: str, why: str) -> AddressRefused:
    return AddressRefused(f"the name {host!r} did not resolve ({why}): check the name in the URL",
                          host=host, address="", category="unresolved")


async def _resolve(host: str, port: int, timeout: float) -> list[IP]:
    if not host or _NUMERIC_LAST_LABEL.search(host):
        raise AddressRefused(f"the host {host!r} is neither a name nor an IP address in its usual spelling: "
                             "write a name, or the address as a.b.c.d or [v6]", host=host, address="",
                             category="not a name")
    try:
        async with asyncio.timeout(timeout):
            answers = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as error:  # TimeoutError among them
        why = f"no answer within {timeout:g} s" if isinstance(error, TimeoutError) else str(error)
        raise _unresolved(host, why or type(error).__name__) from None
    if not answers:
        raise _unresolved(host, "no addresses")
    return [ipaddress.ip_address(str(sockaddr[0])) for *_, sockaddr in answers]


async def resolve_checked(host: str, port: int, names_literally: Callable[[str], bool], timeout: float) -> Checked:
    """The one address the gate may connect to for ``host``, or AddressRefused saying why not and what to do."""
    if not 0 < port < 65536:
        raise ValueError(f"port {port!r} of host {host!r} is not a TCP port: give 1 to 65535")
    literal = _literal(host)
    if literal is not None:
        category = forbidden_category(literal)
        if category is not None and not names_literally(str(_unscoped(literal))):
            raise _refused(host, literal, category, literal=True)
        return Checked(host, literal, port, literal=True)
    addresses = await _resolve(host, port, timeout)
    for ip in addresses:  # any forbidden answer refuses the name: rebinding mixes public and private answers
        category = forbidden_category(ip)
        if category is not None:
            raise _refused(host, ip, category, literal=False)
    return Checked(host, addresses[0], port, literal=False)


async def open_checked(checked: Checked, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP connection to the checked address itself (numeric only: nothing is resolved again), within timeout."""
    where = f"{checked.host!r} at {checked.address} port {checked.port}"
    try:
        async with asyncio.timeout(timeout):
            return await asyncio.open_connection(str(checked.address), checked.port, flags=socket.AI_NUMERICHOST)
    except TimeoutError:
        raise ConnectionError(f"could not connect to {where}: no answer within {timeout:g} s") from None
    except OSError as error:
        raise ConnectionError(f"could not connect to {where}: {error.strerror or error}") from error
