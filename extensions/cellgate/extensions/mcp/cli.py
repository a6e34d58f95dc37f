"""``cellgate mcp serve``, registered through the ``cellgate.commands`` entry point."""

from __future__ import annotations

import argparse
from typing import Any

from .listen import in_url, local_users_refusal, loopback


def add_parser(sub: Any) -> None:
    p = sub.add_parser("mcp", help="cellgate as an MCP server")
    actions = p.add_subparsers(dest="action", required=True)
    serve = actions.add_parser("serve", help="serve execute_python, search_tools and describe_tool over MCP")
    serve.add_argument("--config", help="cellgate.toml (tools, MCP servers behind it, policy, sandbox)")
    serve.add_argument("--tools", nargs="+", default=[], metavar="FILE", help="Python files whose functions are tools")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                       help="stdio: one client, the process that started this one (the default); http: clients "
                       "connect to --host and --port (streamable HTTP)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="http: the address to listen on (other than loopback only with [mcp.auth])")
    serve.add_argument("--port", type=int, default=8000, help="http: the port (the endpoint is /mcp)")
    serve.add_argument("--allow-local-users", action="store_true",
                       help="http without [mcp.auth]: serve every local account (any local process can connect)")
    serve.add_argument("--certfile", help="http: serve HTTPS with this PEM certificate (chain); needs --keyfile")
    serve.add_argument("--keyfile", help="http: the PEM private key of --certfile")
    serve.add_argument("--max-sessions", type=int, default=8, help="sandboxed sessions at once")
    serve.add_argument("--idle-timeout", type=float, default=1800,
                       help="seconds after its last call that a session ends for good: its sandbox is stopped, its "
                       "handle no longer works, and a paused one's checkpoint is deleted (default 1800). Not [mcp] "
                       "idle_pause, which (if set, and below this) pauses an unused session into a checkpoint "
                       "sooner, freeing its sandbox, and the next call resumes it with its variables")
    serve.add_argument("--isolation", choices=("gvisor", "none"), help=argparse.SUPPRESS)
    serve.set_defaults(run=_serve)


__all__ = ["add_parser", "loopback"]


def _serve(args: argparse.Namespace) -> int:
    from cellgate.gate import ConfigError, load_settings
    from cellgate.gate.ext import find_config

    from .config import McpConfig

    if args.max_sessions < 1 or args.idle_timeout <= 0:
        raise ConfigError("--max-sessions must be at least 1 and --idle-timeout above 0")
    config = find_config(args.config)
    settings = load_settings(config)
    url, auth = None, settings.section("mcp", McpConfig).auth
    if args.transport == "http":
        where = f"{config} has no [mcp.auth]" if config else "no cellgate.toml was found (so no [mcp.auth])"
        if auth is None and not loopback(args.host):
            raise ConfigError(
                f"--host {args.host} would let anyone who reaches it run code and call your tools with your "
                f"credentials, and {where}; configure [mcp.auth] (JWT access tokens from your authorization server, "
                "or static tokens in a file), or listen on 127.0.0.1 (with --allow-local-users)")
        if bool(args.certfile) != bool(args.keyfile):
            raise ConfigError("--certfile and --keyfile go together: give both to serve HTTPS, or neither")
        if auth is None and not args.allow_local_users:
            raise ConfigError(local_users_refusal(args.host, args.port, where))
        url = f"{'https' if args.certfile else 'http'}://{in_url(args.host)}:{args.port}/mcp"
    from .serve import build_server, run_http
    from .stopping import run_stdio

    options = {"config": str(config) if config else None, "tools": args.tools, "isolation": args.isolation}
    server = build_server(settings, options, single_client=args.transport == "stdio",
                          max_sessions=args.max_sessions, idle_timeout=args.idle_timeout, url=url)
    if args.transport == "stdio":
        run_stdio(server)  # SIGTERM closes every session first (stopping.py)
    else:
        run_http(server, args.host, args.port, args.certfile, args.keyfile, resource=auth.resource if auth else None)
    return 0
