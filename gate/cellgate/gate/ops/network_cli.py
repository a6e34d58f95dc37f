"""``cellgate network check URL``: which ``[[network.allow]]`` rule decides a request, and why, before anything runs.

It says what the gate would decide (``network.rules.decide``) with the config's file and line, whether the rule
injects a header (its name and variable, never the value), and, when nothing allows the request, the TOML that
would. It resolves no name: an address a name resolves to is checked when the gate connects.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where the command runs: `cellgate --help` pays for none of them
    from cellgate.gate.config import Settings
    from cellgate.gate.network.rules import Match, Target


def _where(settings: Settings, index: int) -> str:
    """'cellgate.toml:12' for network.allow[index] (the path relative to here when it is below)."""
    from cellgate.gate.config import locate

    if settings.source is None:
        return "no config file"
    path = Path(settings.source)
    line = locate(path.read_text(), ["network", "allow", index])
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    return f"{shown}:{line}" if line else shown


def _address_note(match: Match | None, target: Target) -> tuple[str, bool] | None:
    """For a host that is a non-public IP address: what the gate does there, and whether it connects at all."""
    import ipaddress

    try:
        address = ipaddress.ip_address(target.host)
    except ValueError:
        return None
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    if (mapped or address).is_global and not (mapped or address).is_multicast:
        return None
    kind = "a loopback" if address.is_loopback else "a private or reserved"
    if match is None:
        return f"note: {target.host} is {kind} address: a rule reaches it only by naming it literally", False
    if match.rule.names_literally(target.host):
        return (f"note: {target.host} is {kind} address: the gate connects there only because {match.label} names "
                "it literally"), True
    return (f"refused when connecting: {target.host} is {kind} address and {match.label} does not name it "
            f"literally (a wildcard never reaches one); name it in a rule's url to allow it"), False


def check(args: argparse.Namespace) -> int:
    from cellgate.gate.config import find_config, load_settings
    from cellgate.gate.network.rules import NoMatch, decide, parse_target

    settings = load_settings(find_config(args.config))
    method = args.method.upper()
    try:
        target = parse_target(args.url)
    except ValueError as exc:
        print(f"refused: {exc}")
        return 1
    decided = decide(settings.network, method, target)
    if isinstance(decided, NoMatch):
        print(f"refused: {decided.reason}" + ("" if settings.source else " (no cellgate.toml found)"))
        note = _address_note(None, target)
        if note:
            print(note[0])
        if decided.suggestion:
            print(f"to allow it, add to {settings.source or 'cellgate.toml'}:\n\n{decided.suggestion}")
        return 1
    rule = decided.rule
    print(f"{rule.decision} by {decided.label} ({_where(settings, decided.index)}): {rule.url}, methods "
          f"{', '.join(rule.methods)}")
    if rule.decision == "approve":
        approver = settings.policy.approver
        print(f"  each such request waits for a person's answer ([policy] approver = {approver!r}"
              + (": 'deny' refuses every one; set an approver)" if approver == "deny" else ")"))
    if rule.inject is not None:
        told = ", ".join(f"${name} ({'set' if os.environ.get(name) else 'NOT SET here: the request would fail'})"
                         for name in rule.inject.env_names())
        print(f"  injects header {rule.inject.header} on the host, its value from {told}; the sandbox never sees it")
    print(f"  responses up to {settings.network.response_limit_mb(rule):g} MB, requests up to "
          f"{settings.network.max_request_mb:g} MB, timeout {settings.network.timeout:g} s")
    note = _address_note(decided, target)
    if note:
        print(note[0])
        return 0 if note[1] else 1
    return 0


def add_network(sub: Any) -> None:
    p = sub.add_parser("network", help="check what a cell's HTTP(S) requests may reach ([[network.allow]])",
                       description="Check the [network] policy of a cellgate.toml: which [[network.allow]] rule "
                       "decides a request a cell's own HTTP client would make, and why.")
    actions = p.add_subparsers(dest="action", required=True)
    checking = actions.add_parser("check", help="print the rule that decides a request to URL and why; exit "
                                  "status 0 if allowed or approved, 1 if refused",
                                  description="Print the [[network.allow]] rule that decides a request to URL (its "
                                  "file and line, its methods, whether it injects a header: the header's name and "
                                  "whether its variable is set, never the value), or why the request is refused and "
                                  "the rule that would allow it. Exit status 0 if allowed or approved, 1 if refused. "
                                  "Names are not resolved: the addresses they resolve to are checked when the gate "
                                  "connects.")
    checking.add_argument("url", metavar="URL", help="the absolute http:// or https:// URL a cell would request")
    checking.add_argument("--method", default="GET", metavar="M", help="the request's method (default: GET)")
    checking.add_argument("--config", help="cellgate.toml (default: $CELLGATE_CONFIG, then ./cellgate.toml)")
    checking.set_defaults(run=check)
