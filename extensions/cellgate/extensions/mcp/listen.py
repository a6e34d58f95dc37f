"""Where ``cellgate mcp serve --transport http`` listens, and who can reach it there.

Loopback keeps the network out, not this host's other accounts: every local
process, another user's or a daemon's (``nobody``, a web server's), can
connect to 127.0.0.1. Without ``[mcp.auth]`` each of them would run code and
call the operator's tools with the operator's credentials, so the server
refuses to start unless the operator says so (``--allow-local-users``). The
refusal does not count accounts: uids, not logins, are the boundary, and
every host runs processes of uids other than the operator's.

Not a Unix socket instead: MCP clients reach streamable HTTP by URL (Claude
Code, Claude Desktop, Cursor, VS Code, the SDK's ``streamable_http_client``),
and none takes a socket path; a client on this host that is the only one is
served better by stdio, which needs no port at all.

A browser is another way in: a page on attacker.example can resolve its own
name to a loopback address (DNS rebinding) and send requests whose Host is
that name. The MCP SDK refuses a Host or Origin outside its
``TransportSecuritySettings`` (421, 403), but turns the check on by itself only
for 127.0.0.1, localhost and ::1; here it is on for whichever loopback
address is bound. Beyond loopback ``[mcp.auth]`` is required, and a rebinding
page has no bearer token to send.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the MCP SDK is imported when a server starts, not by every cellgate command
    from mcp.server.transport_security import TransportSecuritySettings

THE_SDKS_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})  # any one of them reaches the others' server


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def in_url(host: str) -> str:
    """``host`` as it is written in a URL and a Host header (an IPv6 address in brackets)."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def transport_security(host: str, resource: str | None = None) -> TransportSecuritySettings | None:
    """Host/Origin checks for a server bound to ``host``: the bound address (the SDK's three names, when it is
    one of them) and the host of ``[mcp.auth] resource`` (a proxy on this host may forward its name). None beyond
    loopback, where ``[mcp.auth]`` is required."""
    from mcp.server.transport_security import TransportSecuritySettings

    if not loopback(host):
        return None
    names = {in_url(host)}
    if names <= THE_SDKS_NAMES:
        names |= THE_SDKS_NAMES
    public = urlsplit(resource).hostname if resource else None
    if public:
        names.add(in_url(public))
    hosts = sorted(f"{name}{port}" for name in names for port in ("", ":*"))
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"{scheme}://{h}" for scheme in ("http", "https") for h in hosts])


def local_users_refusal(host: str, port: int, where: str) -> str:
    """Why a server without ``[mcp.auth]`` does not start without ``--allow-local-users``, and what to do."""
    return (f"--transport http on {in_url(host)}:{port} without [mcp.auth] ({where}) would serve every account of "
            "this host, not only yours: any local process, another user's or a daemon's, can connect to a loopback "
            "port and run code with your tools and credentials; configure [mcp.auth] (static tokens in a file are "
            "enough), use --transport stdio for a client on this host, or pass --allow-local-users if you trust "
            "every account here")
