"""Tools from MCP servers: ``[mcp.servers.NAME]`` in cellgate.toml becomes ``tools.NAME.*``.

The host connects to each server (stdio or streamable HTTP) on a private
event loop thread; the sandbox never sees a server's command, environment or
headers. Each MCP tool becomes a gate ``Tool`` whose function calls the
server: input schemas give the stub signatures, an ``outputSchema`` gives a
typed result (the structured content, validated here), ``isError`` raises
with the server's message, and annotations set the default decision
(``readOnlyHint`` -> allow, ``destructiveHint`` -> approve) that the policy
can override. A server that dies is restarted once; the call that found it
dead fails as unavailable (its outcome is unknown, so it is never retried).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any, Literal

import httpx2
import jsonschema
from mcp import Client
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult
from mcp_types import Tool as McpTool

from cellgate.gate import CellgateError, ConfigError, Settings, SourceUnavailable, Tool
from cellgate.gate.ext import ToolSource

from .config import McpConfig, McpServer
from .names import python_names

log = logging.getLogger("cellgate.mcp")


# How the SDK client words its own outputSchema checks of a result (mcp.client.session.validate_tool_result).
_SDK_RESULT_CHECKS = ("Invalid structured content returned by tool", "Invalid schema for tool")
_SDK_RESULT_MISSING = "has an output schema but did not return structured content"


def schema_problem(error: jsonschema.exceptions.ValidationError) -> str:
    """Where a result breaks its schema and which rule, without any of the result's own values
    (they are the server's output, and an error message goes back to the cell and the model)."""
    where = "/".join(str(p)[:64] for p in error.absolute_path) or "(the result)"
    rule = json.dumps(error.validator_value, default=str)[:200]
    return f"at {where}, the schema's {error.validator!r} rule ({rule}) fails; the content is not shown"


class McpToolError(CellgateError, RuntimeError):
    """The MCP server answered the call with an error (isError) or a result that breaks its own schema."""

    code = "mcp-tool"


def reason(exc: BaseException) -> str:
    """The first real exception inside task-group wrappers, as 'Type: message'."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"MCPError: {exc.error.message}"
    return f"{type(exc).__name__}: {exc}"


def default_decision(tool: McpTool) -> Literal["allow", "approve"] | None:
    hints = tool.annotations
    if hints is None:
        return None
    if hints.read_only_hint:
        return "allow"
    if hints.destructive_hint:
        return "approve"
    return None


def effect_hint(tool: McpTool) -> Literal["read", "idempotent"] | None:
    """What the server's annotations say the tool does (a tool's effect): the server's word, shown as such, which
    ``[policy.tools.NAME] effect`` overrides; it never changes a decision."""
    hints = tool.annotations
    if hints is None:
        return None
    if hints.read_only_hint:
        return "read"
    return "idempotent" if hints.idempotent_hint else None


def content_value(result: CallToolResult) -> Any:
    """An unstructured result as data: its text, or a list of its blocks when not all are text."""
    blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content]
    if all(block.get("type") == "text" for block in blocks):
        return "\n".join(block["text"] for block in blocks)
    return blocks


class Connection:
    """One MCP server: a client held open by a task on the source's loop, restarted at most once."""

    def __init__(self, name: str, config: McpServer, source: McpToolSource) -> None:
        self.name = name
        self.config = config
        self.source = source
        self.client: Client | None = None
        self.restarts = 0
        self.gone: str | None = None  # why its tools are unavailable for the rest of the session
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def describe(self) -> str:
        """Where the server is, without its environment or headers (they may hold credentials)."""
        if self.config.command:
            return f"stdio: {' '.join([self.config.command, *self.config.args])}"
        return f"streamable HTTP: {self.config.url}"

    async def start(self) -> list[McpTool]:
        ready: asyncio.Future[list[McpTool]] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._hold(ready))
        try:
            async with asyncio.timeout(self.config.start_timeout):  # not wait_for (gh-86296)
                return await asyncio.shield(ready)
        except TimeoutError:
            await self.stop()
            raise TimeoutError(f"no tool list within {self.config.start_timeout:g} s (start_timeout)") from None

    async def _hold(self, ready: asyncio.Future[list[McpTool]]) -> None:
        try:
            async with AsyncExitStack() as stack:
                if self.config.command:
                    target: Any = StdioServerParameters(
                        command=self.config.command, args=self.config.args, cwd=self.config.cwd,
                        env={**get_default_environment(), **self.config.env})
                else:
                    # The MCP SDK's recommended timeouts: a response stream may stay open for minutes.
                    http = await stack.enter_async_context(httpx2.AsyncClient(
                        headers=self.config.headers, timeout=httpx2.Timeout(30.0, read=300.0)))
                    target = streamable_http_client(str(self.config.url), http_client=http)
                client = await stack.enter_async_context(Client(target))
                tools, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self.client = client
                ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - the outcome is reported through `ready` or on the next call
            if not ready.done():
                ready.set_exception(RuntimeError(reason(exc)))
        finally:
            self.client = None

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            try:
                async with asyncio.timeout(10):  # not wait_for (gh-86296)
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)

    async def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        if self.gone:
            raise SourceUnavailable(self.gone)
        client = self.client
        if client is None:
            raise SourceUnavailable(f"MCP server {self.name!r} is not connected")
        try:
            return await client.call_tool(tool, args)
        except RuntimeError as exc:
            # The SDK client checks a result against the tool's outputSchema itself, and its message holds the
            # whole invalid instance: never let that text reach the cell.
            if not (str(exc).startswith(_SDK_RESULT_CHECKS) or _SDK_RESULT_MISSING in str(exc)):
                raise
            cause = exc.__cause__
            problem = schema_problem(cause) if isinstance(cause, jsonschema.exceptions.ValidationError) else \
                "it is missing or the schema is unusable"
            raise McpToolError(f"MCP server {self.name!r}: tool {tool!r} returned structured content that does "
                               f"not match its outputSchema: {problem}") from None
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise McpToolError(f"MCP server {self.name!r}: {exc.error.message}") from None
            lost = "its connection closed"
        except (httpx2.TransportError, OSError) as exc:
            lost = f"{type(exc).__name__}: {exc}"
        raise SourceUnavailable(await self._recover(client, lost))

    async def _recover(self, broken: Client, lost: str) -> str:
        """Restart a server whose connection broke (once per session); the message for the failed call."""
        what = f"MCP server {self.name!r} ({self.describe()}) stopped during this call ({lost})"
        async with self._lock:
            if self.gone:
                return self.gone
            if self.client is not None and self.client is not broken:
                return f"{what}; it was already restarted: this call's outcome is unknown, check before retrying"
            await self.stop()
            if self.restarts >= 1:
                self.gone = (f"MCP server {self.name!r} ({self.describe()}) stopped again after its restart; "
                             "its tools are unavailable for the rest of this session")
                self.source.report("mcp-server-died", server=self.name, restarted=False, detail=lost[:300])
                return self.gone
            self.restarts += 1
            try:
                await self.start()
            except Exception as exc:
                self.gone = (f"{what}; restarting it failed ({reason(exc)}): its tools are unavailable "
                             "for the rest of this session")
                self.source.report("mcp-server-died", server=self.name, restarted=False, detail=self.gone[:300])
                return self.gone
            self.source.report("mcp-server-restarted", server=self.name, detail=lost[:300])
            return f"{what}; cellgate restarted it: this call's outcome is unknown, check before calling again"


class McpToolSource(ToolSource):
    """The ``mcp`` tool source (entry point ``cellgate.tool_sources``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.connections: dict[str, Connection] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cellgate-mcp", daemon=True)

    @classmethod
    def describe(cls, settings: Settings) -> list[str]:
        servers = settings.section("mcp", McpConfig).servers
        return [f"mcp:{name} ({server.transport()})" for name, server in servers.items()]

    def _run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def open(self) -> list[Tool]:
        self._thread.start()
        tools: list[Tool] = []
        for name, config in self.settings.section("mcp", McpConfig).servers.items():
            connection = Connection(name, config, self)
            try:
                listed = self._run(connection.start(), config.start_timeout + 15)
            except Exception as exc:
                message = (f"MCP server {name!r} ({connection.describe()}) failed to start or to list its tools: "
                           f"{reason(exc)}")
                if config.optional:
                    log.warning("%s; it is optional, so the session starts without its tools", message)
                    self.notes.append({"server": name, "what": "optional-server-missing", "detail": message})
                    continue
                self.close()
                raise ConfigError(f"{message}; fix [mcp.servers.{name}] in cellgate.toml, or set optional = true "
                                  "to start without it") from None
            self.connections[name] = connection
            tools += self._tools(connection, listed)
        return tools

    def _tools(self, connection: Connection, listed: list[McpTool]) -> list[Tool]:
        names = python_names([t.name for t in listed])
        tools = []
        for mcp_tool in listed:
            ident = names[mcp_tool.name]
            description = mcp_tool.description or mcp_tool.title or f"The {mcp_tool.name} tool of {connection.name}."
            if ident != mcp_tool.name:
                description += f"\n\n(MCP tool {mcp_tool.name!r} of server {connection.name!r}.)"
            parameters = dict(mcp_tool.input_schema)
            parameters.setdefault("type", "object")
            parameters.setdefault("properties", {})
            parameters.pop("$schema", None)
            output = dict(mcp_tool.output_schema) if mcp_tool.output_schema else None
            tools.append(Tool(name=f"{connection.name}.{ident}", description=description, parameters=parameters,
                              function=self._caller(connection, mcp_tool.name, output), source=f"mcp:{connection.name}",
                              default_decision=default_decision(mcp_tool), returns=output,
                              effect=effect_hint(mcp_tool), effect_from="the server's hint"))
        return tools

    def _caller(self, connection: Connection, tool: str, output_schema: dict[str, Any] | None) -> Any:
        validator = jsonschema.Draft202012Validator(output_schema) if output_schema else None
        loop = self._loop

        async def call_mcp_tool(**args: Any) -> Any:
            future = asyncio.run_coroutine_threadsafe(connection.call(tool, args), loop)
            result: CallToolResult = await asyncio.wrap_future(future)
            if result.is_error:
                text = content_value(result)
                raise McpToolError(text if isinstance(text, str) and text else
                                   f"MCP server {connection.name!r} reported an error without a message")
            if validator is None:
                return content_value(result)
            data = result.structured_content
            if data is None:
                raise McpToolError(f"MCP server {connection.name!r}: tool {tool!r} declares an outputSchema "
                                   "but returned no structured content")
            error = jsonschema.exceptions.best_match(validator.iter_errors(data))
            if error is not None:
                raise McpToolError(f"MCP server {connection.name!r}: tool {tool!r} returned structured content "
                                   f"that does not match its outputSchema: {schema_problem(error)}")
            return data

        return call_mcp_tool

    def close(self) -> None:
        if not self._thread.is_alive():
            if not self._loop.is_closed() and not self._loop.is_running():
                self._loop.close()
            return
        for connection in self.connections.values():
            try:
                self._run(connection.stop(), 20)
            except Exception as exc:  # noqa: BLE001 - closing must not raise
                log.warning("MCP server %r did not stop cleanly: %s", connection.name, reason(exc))
        self.connections.clear()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
