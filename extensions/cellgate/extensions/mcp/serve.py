"""``cellgate mcp serve``: cellgate as an MCP server, for any MCP client.

Tools: ``execute_python(code, session, retry)`` runs one cell in a sandboxed, gated,
recorded session; ``search_tools(query)`` and ``describe_tool(name)`` find the
session's tools; ``upload_file`` and ``download_file`` move a file in or out
(``file_tools``); ``fork_session(session, count)`` continues one session's kernel in new sessions;
``close_session(session)`` ends one. Each session's audit notebook is the resource
``cellgate://sessions/{session}/notebook``.

MCP 2026-07-28 has no protocol sessions (every request stands alone), so,
as the protocol recommends (SEP-2567), state lives behind a handle the server
mints: the first ``execute_python`` without ``session`` starts a sandboxed
kernel and returns its handle, a 128-bit random capability the client passes
back to keep its variables. Over stdio (one client per process) a call
without a handle reuses that client's one session. Sessions end with
``close_session`` or after ``idle_timeout`` seconds unused. With a backend that can checkpoint (local gVisor, as
root) a session unused for ``[mcp] idle_pause`` seconds is paused and its sandbox freed, and when the server stops
its sessions are paused (``[mcp] pause_on_stop``); the next call with the handle, in this process or a restarted
server's, resumes it with its variables (``sessions``, ``parked``).

Over HTTP with ``[mcp.auth]`` every request carries a bearer token (``auth``),
a handle is good only in the hands of the principal that started its session,
and ``[mcp.quotas]`` bounds each principal (``sessions``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from opentelemetry import propagate
from pydantic import BaseModel, Field

from cellgate.gate import ConfigError, SessionError, Settings, ToolRegistry
from cellgate.gate.ext import close_sources, open_sources, stub_signature
from cellgate.kernel import runtime

from . import file_tools, stopping
from .auth import Verifier, auth_settings, current_principal, load_tokens
from .cell_view import CellOutput, cell_content, cell_output
from .cell_view import cell_text as cell_text  # what execute_python's text content is, for tests
from .config import McpConfig
from .listen import transport_security
from .parked import Parking
from .sessions import MAX_FORKS, Sessions


class Forked(BaseModel):
    """The structuredContent of fork_session."""

    session: str = Field(description="the session that was copied (it goes on)")
    forks: list[str] = Field(description=f"the new sessions' handles (at most {MAX_FORKS}), each to pass back as "
                                         "`session`")


def catalog(settings: Settings, tools: list[str]) -> list[dict[str, Any]]:
    """The manifest every session of this server gets (MCP servers behind it are asked once, then closed)."""
    registry = ToolRegistry.from_paths(settings.tool_paths(), granted=tools)
    close_sources(open_sources(settings, registry))
    return registry.manifest()


def state_folder(settings: Settings, config: McpConfig) -> Path:
    """Where the server keeps its paused sessions: ``[mcp] state_dir``, or ``mcp-serve`` in ``[audit] dir``.

    The folder's own name is not resolved (only the folders above it): a link there is refused by
    ``private_folder``, not followed to wherever it points."""
    if not config.state_dir:
        return settings.resolve(settings.audit.dir) / "mcp-serve"
    given = Path(os.path.expanduser(config.state_dir))
    return settings.resolve(str(given.parent)) / given.name


def build_server(settings: Settings, options: dict[str, Any], single_client: bool, max_sessions: int = 8,
                 idle_timeout: float = 1800.0, url: str | None = None) -> MCPServer:
    """The server; ``url`` (where it is reached over HTTP) is given when ``[mcp.auth]`` is to be enforced."""
    config = settings.section("mcp", McpConfig)
    manifest = catalog(settings, options.get("tools") or [])
    signatures = {t["name"]: stub_signature(t, shown=True) for t in manifest}
    if config.idle_pause and config.idle_pause >= idle_timeout:
        raise ConfigError(f"[mcp] idle_pause = {config.idle_pause:g} is not below --idle-timeout {idle_timeout:g}: "
                          "sessions would end before they pause; lower idle_pause or raise --idle-timeout")
    parking = Parking(state_folder(settings, config))
    sessions = Sessions(options, single_client, max_sessions, idle_timeout, pool_size=settings.sandbox.pool,
                        quotas=config.quotas, parking=parking, idle_pause=config.idle_pause,
                        pause_on_stop=config.pause_on_stop)
    auth, verifier = None, None
    if config.auth is not None and url is not None:
        auth = auth_settings(config.auth, url)
        verifier = Verifier(config.auth, load_tokens(config.auth, settings.resolve))

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        try:
            await sessions.start()
            yield
        finally:  # also on SIGTERM (uvicorn's shutdown, or stopping.run_stdio's cancellation)
            await stopping.close_all(sessions.close_all)

    server = MCPServer(
        "cellgate", lifespan=lifespan,
        instructions=("Run Python in a gVisor-sandboxed, stateful IPython kernel with execute_python. The preloaded "
                      "module `tools` calls the operator's tools through a gate (policy, budgets, approvals) and "
                      "every cell is recorded. Pass the returned `session` back to keep your variables. Do the "
                      "work in code and print only what you need."), auth=auth, token_verifier=verifier)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def execute_python(code: str, session: str | None = None,
                             retry: bool = False) -> Annotated[CallToolResult, CellOutput]:
        """Run a Python program as one cell of a sandboxed, stateful IPython kernel; returns what it printed
        (stdout, stderr, the error), the images it displayed, and which writes its tool calls made.

        Args:
            code: The program. The module `tools` is preloaded (see search_tools).
            session: The handle a previous call returned, to keep its variables; omit it to start a session.
            retry: true: this cell retries the session's last failed cell: writes it already made are answered
                from the record, not repeated; false runs everything again.
        """
        if retry and session is None and not single_client:
            raise ToolError("retry: true needs the `session` whose last cell failed; pass its handle")
        handle, entry = await sessions.admit(session, current_principal())
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the request's trace (the MCP SDK continues a client's _meta traceparent)
        async with entry.lock:
            try:
                result = await entry.session.execute(code, traceparent=carrier.get("traceparent"), retry=retry)
            except SessionError as exc:  # e.g. retry when the last cell did not fail: an error result, not a crash
                raise ToolError(str(exc)) from None
        # Claude Code hands its model the structuredContent alone, other clients the content: both hold the output.
        return CallToolResult(content=cell_content(result), is_error=not result.ok,
                              structured_content=cell_output(result, handle).model_dump(mode="json"))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search_tools(query: str = "") -> list[str]:
        """Names and one-line descriptions of the tools (in `tools`) whose name or description has every word of query."""
        return runtime.search(manifest, query)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def describe_tool(name: str) -> str:
        """The Python signature and full description of one tool, e.g. describe_tool('crm.lookup_customer')."""
        try:
            return "tools." + runtime.describe(manifest, signatures, name)
        except LookupError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
    async def close_session(session: str) -> str:
        """End a session: its kernel and variables are gone; its audit notebook stays."""
        await sessions.close(session, current_principal())
        return f"closed session {session}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def fork_session(session: str, count: int = 1) -> Annotated[CallToolResult, Forked]:
        """Copy a session: `count` new sessions, each starting with this session's variables, imports and files as
        they are now, in a sandbox of its own; changes in one are not seen by the others. The session goes on.

        Args:
            session: The handle of the session to copy.
            count: How many copies (1 to the number of sessions you may still open).
        """
        handles = await sessions.fork(session, current_principal(), count)
        forked = Forked(session=session, forks=handles)
        return CallToolResult(content=[TextContent(text=f"forked session {session} into {len(handles)}: "
                                                        + ", ".join(handles))],
                              structured_content=forked.model_dump(mode="json"))

    file_tools.register(server, sessions, settings.sandbox.file_limit_mb << 20)

    @server.resource("cellgate://sessions/{session}/notebook", mime_type="application/x-ipynb+json",
                     description="The audit notebook of a session: every cell, its outputs and its gated calls.")
    async def notebook(session: str) -> str:
        path = await sessions.notebook(session, current_principal())
        return path.read_text(encoding="utf-8")

    return server


def run_http(server: MCPServer, host: str, port: int, certfile: str | None, keyfile: str | None,
             resource: str | None = None) -> None:
    """Streamable HTTP at /mcp, as ``server.run("streamable-http")`` serves it, with the Host/Origin checks of the
    address bound (``listen.transport_security``), plus HTTPS when given a certificate (uvicorn's
    ``ssl_certfile``/``ssl_keyfile``)."""
    import uvicorn

    for name, path in (("--certfile", certfile), ("--keyfile", keyfile)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{name} {path!r} is not a file; give the PEM file's path")
    app = server.streamable_http_app(host=host, transport_security=transport_security(host, resource))
    config = uvicorn.Config(app, host=host, port=port, log_level=server.settings.log_level.lower(),
                            ssl_certfile=certfile, ssl_keyfile=keyfile)
    anyio.run(uvicorn.Server(config).serve)
