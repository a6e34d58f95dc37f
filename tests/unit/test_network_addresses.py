"""The gate's address check (issue 45, "No SSRF"): real addresses, the real resolver, real sockets on loopback."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time

import psutil
import pytest

from cellgate.gate.network.addresses import (
    AddressRefused,
    Checked,
    forbidden_category,
    open_checked,
    own_addresses,
    resolve_checked,
)

NONE_OWN: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address] = frozenset()


def category(text: str) -> str | None:
    return forbidden_category(ipaddress.ip_address(text), NONE_OWN)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private (RFC 1918)"),
        ("172.16.0.1", "private (RFC 1918)"),
        ("172.31.255.254", "private (RFC 1918)"),
        ("192.168.1.1", "private (RFC 1918)"),
        ("100.64.0.1", "shared (CGNAT, RFC 6598)"),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("fe80::1", "link-local (cloud metadata)"),
        ("fe80::1%2", "link-local (cloud metadata)"),
        ("fd00::1", "unique local (ULA)"),
        ("fd00:ec2::254", "unique local (ULA)"),  # AWS's IPv6 metadata address
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("0.1.2.3", "this network (RFC 1122)"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.0.8", "reserved"),
        ("100::1", "reserved"),
        ("4000::1", "reserved"),  # outside 2000::/3, the only global unicast IPv6
        ("2001::1", "reserved"),  # Teredo
        ("192.0.2.10", "documentation/benchmark"),
        ("198.51.100.7", "documentation/benchmark"),
        ("203.0.113.9", "documentation/benchmark"),
        ("198.18.0.1", "documentation/benchmark"),
        ("2001:db8::1", "documentation/benchmark"),
    ],
)
def test_each_forbidden_category(address: str, expected: str) -> None:
    assert category(address) == expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
        ("::10.0.0.1", "private (RFC 1918)"),  # IPv4-compatible (deprecated)
        ("::ffff:0:192.168.0.1", "private (RFC 1918)"),  # IPv4-translated (SIIT)
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", "link-local (cloud metadata)"),
        ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),  # NAT64 of the metadata address
        ("64:ff9b:1::a00:1", "private (RFC 1918)"),  # local-use NAT64 (RFC 8215)
    ],
)
def test_an_embedded_ipv4_address_is_checked_as_itself(address: str, expected: str) -> None:
    found = category(address)
    assert found is not None and found.startswith(expected), found


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "2001:4860:4860::8888", "::ffff:8.8.8.8",
                "2002:808:808::1", "64:ff9b::808:808", "172.32.0.1", "100.128.0.1", "11.0.0.1"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert category(address) is None


def test_the_hosts_own_addresses_are_refused() -> None:
    # psutil is the independent witness of the host's interfaces; the module reads Linux's own lists.
    seen = {ipaddress.ip_address(entry.address.split("%")[0]) for entries in psutil.net_if_addrs().values()
            for entry in entries if entry.family in (socket.AF_INET, socket.AF_INET6)}
    outward = {ip for ip in seen if not ip.is_loopback}
    assert outward, f"this host shows no non-loopback address to test with: {seen}"
    assert outward <= own_addresses()
    for ip in outward:
        assert forbidden_category(ip) == "the host's own address", ip
    # and an address only because it is the host's: a public one, named as its own
    assert forbidden_category(ipaddress.ip_address("8.8.8.8"), frozenset({ipaddress.ip_address("8.8.8.8")})) == (
        "the host's own address")


def test_the_hosts_name_resolves_to_a_refused_address() -> None:
    ip = ipaddress.ip_address(socket.gethostbyname(socket.gethostname()))
    assert forbidden_category(ip) is not None


def test_own_addresses_are_read_once_and_kept() -> None:
    assert own_addresses() is own_addresses()


def resolve(host: str, port: int = 80, allowed: frozenset[str] = frozenset(), timeout: float = 5.0) -> Checked:
    return asyncio.run(resolve_checked(host, port, allowed.__contains__, timeout))


def test_a_name_never_reaches_loopback_even_if_a_rule_names_its_address() -> None:
    with pytest.raises(AddressRefused) as refused:
        resolve("localhost", allowed=frozenset({"127.0.0.1", "::1"}))
    error = refused.value
    assert (error.host, error.category) == ("localhost", "loopback")
    assert error.address in ("127.0.0.1", "::1")
    text = str(error)
    assert "'localhost'" in text and error.address in text and "loopback" in text and "[[network.allow]]" in text
    assert "a name never reaches it" in text


def test_a_forbidden_literal_is_reached_only_when_a_rule_names_it() -> None:
    with pytest.raises(AddressRefused) as refused:
        resolve("127.0.0.1", allowed=frozenset({"10.0.0.1"}))
    assert (refused.value.address, refused.value.category) == ("127.0.0.1", "loopback")
    assert "names 127.0.0.1 literally" in str(refused.value)
    assert resolve("127.0.0.1", 8080, frozenset({"127.0.0.1"})) == Checked(
        "127.0.0.1", ipaddress.ip_address("127.0.0.1"), 8080, literal=True)


def test_an_ipv6_literal_with_or_without_brackets() -> None:
    for host in ("[::1]", "::1"):
        assert resolve(host, allowed=frozenset({"::1"})).address == ipaddress.ip_address("::1")
        with pytest.raises(AddressRefused, match="loopback"):
            resolve(host)
    with pytest.raises(AddressRefused, match="link-local"):
        resolve("[::ffff:169.254.169.254]")


def test_a_public_literal_is_not_resolved_and_needs_no_rule() -> None:
    asked: list[str] = []

    def names_literally(address: str) -> bool:
        asked.append(address)
        return False

    checked = asyncio.run(resolve_checked("[2606:4700:4700::1111]", 443, names_literally, 5.0))
    assert checked == Checked("[2606:4700:4700::1111]", ipaddress.ip_address("2606:4700:4700::1111"), 443, True)
    assert asked == []


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "0x7f000001", "010.0.0.1", "127.1", "127.0.0.1.", ""])
def test_other_spellings_of_an_address_are_refused(host: str) -> None:
    with pytest.raises(AddressRefused) as refused:
        resolve(host, allowed=frozenset({"127.0.0.1", "8.0.0.1"}))
    assert refused.value.category == "not a name"


def test_an_unresolvable_name_is_refused_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(AddressRefused) as refused:
        resolve("no-such-host.invalid", timeout=10.0)
    assert time.monotonic() - started < 5.0
    assert (refused.value.host, refused.value.category) == ("no-such-host.invalid", "unresolved")
    assert "'no-such-host.invalid'" in str(refused.value)


def test_a_port_outside_tcps_range_is_an_error() -> None:
    for port in (0, 65536, -1):
        with pytest.raises(ValueError, match=f"port {port} of host 'example.com'"):
            resolve("example.com", port)


def test_open_checked_reaches_a_checked_literal() -> None:
    async def scenario() -> bytes:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.readexactly(5))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        async with server:
            port = server.sockets[0].getsockname()[1]
            checked = await resolve_checked("127.0.0.1", port, {"127.0.0.1"}.__contains__, 5.0)
            reader, writer = await open_checked(checked, 5.0)
            writer.write(b"hello")
            answer = await asyncio.wait_for(reader.read(), 5.0)
            writer.close()
            await writer.wait_closed()
            return answer

    assert asyncio.run(scenario()) == b"hello"


def test_a_closed_port_is_a_connection_error_at_once() -> None:
    with socket.socket() as probe:  # a port nothing listens on: bound, then let go
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    checked = Checked("my-service", ipaddress.ip_address("127.0.0.1"), port, literal=False)
    started = time.monotonic()
    with pytest.raises(ConnectionError) as refused:
        asyncio.run(open_checked(checked, 10.0))
    assert time.monotonic() - started < 5.0
    assert "'my-service'" in str(refused.value) and "127.0.0.1" in str(refused.value) and str(port) in str(
        refused.value)
