"""``cellgate mcp serve``: cellgate as an MCP server, for any MCP client.

Tools: ``execute_python(code, session)`` runs one cell in a sandboxed, gated,
recorded session; ``search_tools(query)`` and ``describe_tool(name)`` find the
session's tools; ``close_session(session)`` ends one. Each session's audit
notebook is the resource ``cellgate://sessions/{session}/notebook``.

MCP 2026-07-28 has no protocol sessions (every request stands alone), so,
as the protocol recommends (SEP-2567), state lives behind a handle the server
mints: the first ``execute_python`` without ``session`` starts a sandboxed
kernel and returns its handle, a 128-bit random capability the client passes
back to keep its variables. Over stdio (one client per process) a call
without a handle reuses that client's one session. Sessions end with
``close_session``, after ``idle_timeout`` seconds unused, or when the server stops.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from cellgate.gate import (
    Pool,
    Session,
    Settings,
    ToolRegistry,
    close_sources,
    open_sources,
    stub_signature,
    trim,
)
from cellgate.kernel import runtime

OUTPUT_BUDGET = 20_000  # characters of a cell's output in the tool result; the notebook keeps everything


@dataclass
class _Entry:
    session: Session
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)


_log = logging.getLogger(__name__)


class Sessions:
    """Sandboxed sessions by handle."""

    def __init__(self, options: dict[str, Any], single_client: bool, max_sessions: int, idle_timeout: float,
                 pool_size: int = 0) -> None:
        self.options = options
        self.pool_size = pool_size
        self.pool: Pool | None = None
        self.single_client = single_client
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self._entries: dict[str, _Entry] = {}
        self._default: str | None = None
        self._lock = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start closing idle sessions on a timer; with ``[sandbox] pool = N``, start N sandboxes now, so a new
        session does not wait for one."""
        self._sweeper = asyncio.create_task(self._sweep_idle())
        if self.pool_size:
            self.pool = Pool(self.pool_size, max_sessions=self.max_sessions,
                             **self.options, metadata={"pool": {"size": self.pool_size}})
            await self.pool.start()

    async def _new_session(self) -> Session:
        if self.pool is not None:
            return await self.pool.acquire()
        return await Session(**self.options).start()

    async def _end(self, session: Session) -> None:
        if self.pool is not None:
            await self.pool.release(session)
        else:
            await session.shutdown()

    async def get(self, handle: str | None) -> tuple[str, _Entry]:
        async with self._lock:
            await self._close_idle()
            if handle is None and self.single_client and self._default in self._entries:
                handle = self._default
            if handle is not None:
                entry = self._entries.get(handle)
                if entry is None:
                    raise ToolError(f"no session {handle[:80]!r} on this server (it was closed, timed out after "
                                    f"{self.idle_timeout:g} s idle, or never existed); call execute_python without "
                                    "`session` to start a new one")
                entry.used = time.monotonic()
                return handle, entry
            if len(self._entries) >= self.max_sessions:
                raise ToolError(f"this server already runs {len(self._entries)} sessions (--max-sessions "
                                f"{self.max_sessions}); close one with close_session, or try again later")
            session = await self._new_session()
            handle = secrets.token_urlsafe(16)
            self._entries[handle] = _Entry(session)
            if self.single_client:
                self._default = handle
            return handle, self._entries[handle]

    async def _close_idle(self) -> None:
        now = time.monotonic()
        for handle in [h for h, e in self._entries.items() if now - e.used > self.idle_timeout and not e.lock.locked()]:
            await self._end(self._entries.pop(handle).session)

    async def _sweep_idle(self) -> None:
        """An idle session's sandbox goes away on time, whether or not another call ever comes."""
        period = min(max(self.idle_timeout / 4, 0.25), 30.0)
        while True:
            await asyncio.sleep(period)
            try:
                async with self._lock:
                    await self._close_idle()
            except Exception:  # noqa: BLE001 - one session's failed shutdown must not stop the sweeping
                _log.exception("closing an idle session failed")

    async def close(self, handle: str) -> bool:
        async with self._lock:
            entry = self._entries.pop(handle, None)
        if entry is None:
            return False
        async with entry.lock:
            await self._end(entry.session)
        return True

    async def close_all(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        entries, self._entries = list(self._entries.values()), {}
        await asyncio.gather(*(self._end(e.session) for e in entries), return_exceptions=True)
        if self.pool is not None:
            await self.pool.close()

    def notebook(self, handle: str) -> Path:
        entry = self._entries.get(handle)
        if entry is None:
            raise ToolError(f"no session {handle[:80]!r} on this server")
        return entry.session.notebook_path


def catalog(settings: Settings, tools: list[str]) -> list[dict[str, Any]]:
    """The manifest every session of this server gets (MCP servers behind it are asked once, then closed)."""
    registry = ToolRegistry.from_paths(settings.tool_paths(), granted=tools)
    close_sources(open_sources(settings, registry))
    return registry.manifest()


def cell_text(result: Any, budget: int = OUTPUT_BUDGET) -> str:
    text = result.text or "(the program printed nothing)\n"
    if result.status not in ("ok", "error"):
        text += f"[the cell ended with status {result.status!r}]\n"
    return trim(text, budget, "the session's audit notebook")


def build_server(settings: Settings, options: dict[str, Any], single_client: bool, max_sessions: int = 8,
                 idle_timeout: float = 1800.0) -> MCPServer:
    manifest = catalog(settings, options.get("tools") or [])
    signatures = {t["name"]: stub_signature(t, shown=True) for t in manifest}
    sessions = Sessions(options, single_client, max_sessions, idle_timeout, pool_size=settings.sandbox.pool)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        try:
            await sessions.start()
            yield
        finally:
            await sessions.close_all()

    server = MCPServer(
        "cellgate", lifespan=lifespan,
        instructions=("Run Python in a gVisor-sandboxed, stateful IPython kernel with execute_python. The preloaded "
                      "module `tools` calls the operator's tools through a gate (policy, budgets, approvals) and "
                      "every cell is recorded. Pass the returned `session` back to keep your variables. Do the "
                      "work in code and print only what you need."))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    async def execute_python(code: str, session: str | None = None) -> CallToolResult:
        """Run a Python program as one cell of a sandboxed, stateful IPython kernel; returns what it printed.

        Args:
            code: The program. The module `tools` is preloaded (see search_tools).
            session: The handle a previous call returned, to keep its variables; omit it to start a session.
        """
        handle, entry = await sessions.get(session)
        async with entry.lock:
            result = await entry.session.execute(code)
        structured = {"session": handle, "status": result.status, "calls": len(result.calls),
                      "notebook": f"cellgate://sessions/{handle}/notebook"}
        return CallToolResult(content=[TextContent(type="text", text=cell_text(result))],
                              structured_content=structured, is_error=not result.ok)

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
        if await sessions.close(session):
            return f"closed session {session}"
        raise ToolError(f"no session {session[:80]!r} on this server")

    @server.resource("cellgate://sessions/{session}/notebook", mime_type="application/x-ipynb+json",
                     description="The audit notebook of a session: every cell, its outputs and its gated calls.")
    def notebook(session: str) -> str:
        return sessions.notebook(session).read_text(encoding="utf-8")

    return server
