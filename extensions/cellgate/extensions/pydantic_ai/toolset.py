"""CellgateCodeMode: a pydantic-ai toolset whose one tool runs the model's Python in cellgate."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.tools import AgentDepsT, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema, to_jsonable_python

from cellgate.gate import CellResult, ConfigError, Session, SessionError, Tool, ToolRegistry
from cellgate.gate.ext import stub_signature

_CODE_ARGS = SchemaValidator(core_schema.typed_dict_schema(
    {"code": core_schema.typed_dict_field(core_schema.str_schema()),
     "retry": core_schema.typed_dict_field(core_schema.bool_schema(strict=True), required=False)}))
RETRY_DESCRIPTION = ("true: this cell retries the last failed cell: writes it already made are answered from the "
                     "record, not repeated; false runs everything again")


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


@dataclass
class _State:
    """What the copies pydantic-ai makes of the toolset (``dataclasses.replace``) share: one session."""

    session: Session | None = None
    tools: dict[str, ToolsetTool[Any]] = field(default_factory=dict)  # the wrapped tools, this step's
    wrapped: AbstractToolset[Any] | None = None
    ctx: RunContext[Any] | None = None  # the run step the running cell belongs to
    entered: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class CellgateCodeMode(WrapperToolset[AgentDepsT]):
    """Collapses the wrapped toolset into one tool, ``run_code``, that runs Python in a cellgate session.

    In the sandbox each wrapped tool is a top-level ``async def`` taking the tool's arguments by name
    (``rows = await list_orders(month="2026-10")``). Every call goes through the gate: the session's policy
    decides it (tools handed over here are allowed unless the config's ``[policy.tools.NAME]`` says otherwise) and
    the audit notebook records it; then the wrapped toolset runs it on the host with the run's ``RunContext``
    (``ctx.deps``). ``session_options`` are ``cellgate.gate.Session``'s arguments (``config``, ``notebook``,
    ``cwd``, ``isolation``, ...). The session starts when the agent first lists the tools and closes when the
    outermost ``async with`` (the agent run's, or the program's own) ends.
    """

    session_options: Mapping[str, Any] = field(default_factory=dict)
    tool_name: str = "run_code"
    timeout: float | None = None  # seconds a cell may run
    _state: _State = field(default_factory=_State, repr=False, compare=False)

    @property
    def session(self) -> Session | None:
        """The cellgate session, once started (its ``notebook_path`` is the audit notebook)."""
        return self._state.session

    async def __aenter__(self) -> CellgateCodeMode[AgentDepsT]:
        await super().__aenter__()
        self._state.entered += 1
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        state = self._state
        state.entered -= 1
        try:
            if state.entered == 0 and state.session is not None:
                session, state.session = state.session, None
                await session.shutdown()
        finally:
            result = await super().__aexit__(*args)
        return result

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        state = self._state
        tools = await self.wrapped.get_tools(ctx)
        async with state.lock:
            state.wrapped = self.wrapped
            if state.session is None:
                state.session = await self._start(tools)
                state.tools = dict(tools)
            elif set(tools) != set(state.tools):
                missing = sorted(set(tools) - set(state.tools))
                if missing:
                    # WORKAROUND until Session.add_tools (API.md) is merged: the tools are fixed at start.
                    raise ConfigError(f"CellgateCodeMode: the wrapped toolset now offers {missing}, which the "
                                      "running cellgate session does not have; offer every tool from the first step")
            state.tools.update(tools)
        listing = "\n".join(f"- async def {name}{stub_signature(self._entry(t), shown=True)}: "
                            f"{_first_line(t.tool_def.description)}" for name, t in sorted(tools.items()))
        description = (
            "Run Python (CPython 3, in a sandbox; variables persist between calls) and get back what it printed. "
            "These tools are top-level async functions there; await them (top-level await works, as does "
            f"asyncio.gather):\n{listing}\nPrint the results you need. When code fails after some of its writes, "
            "the result lists the writes already done: send the fixed code with retry: true so they are answered "
            "from the record instead of made twice.")
        definition = ToolDefinition(
            name=self.tool_name, description=description,
            parameters_json_schema={"type": "object", "properties": {
                "code": {"type": "string", "description": "The Python code to run."},
                "retry": {"type": "boolean", "default": False, "description": RETRY_DESCRIPTION}},
                "required": ["code"], "additionalProperties": False})
        return {self.tool_name: ToolsetTool(toolset=self, tool_def=definition, max_retries=1,
                                            args_validator=_CODE_ARGS)}

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT],
                        tool: ToolsetTool[AgentDepsT]) -> Any:
        state = self._state
        if name != self.tool_name or state.session is None:
            raise ConfigError(f"CellgateCodeMode has one tool, {self.tool_name!r}, not {name!r}")
        retry = tool_args.get("retry") is True
        async with state.lock:  # one cell at a time; the tools it calls see this step's ctx
            state.ctx = ctx
            try:
                result = await state.session.execute(str(tool_args["code"]), timeout=self.timeout, retry=retry)
            except SessionError as exc:
                if not retry:
                    raise
                return f"{self.tool_name} with retry: true was refused, nothing ran: {exc}"
            finally:
                state.ctx = None
        text = result.text
        if not result.ok and result.error and str(result.error.get("ename")) not in text:
            text += f"{result.error.get('ename')}: {result.error.get('evalue')}\n"
        if result.status not in ("ok", "error"):  # a timeout, a limit, the kernel gone: say so
            limits = ", ".join(result.limits_hit) or "no limit named"
            text += f"(the cell ended with status {result.status!r}: {limits})\n"
        writes = self._writes_text(result)
        if writes:
            text += ("" if not text or text.endswith("\n") else "\n") + ("\n" if text else "") + writes + "\n"
        return text or "(the code printed nothing)"

    def _writes_text(self, result: CellResult) -> str:
        """What the cell's writes did: for a cell that did not end ok (what is done, and how to retry without
        repeating it), or one with writes answered from the record or of unknown outcome; empty otherwise."""
        writes = result.writes
        if result.ok and not (writes.answered or writes.unknown):
            return ""
        return writes.summary(failed_cell=not result.ok, retry_hint=f"call {self.tool_name} again with retry: true")

    @staticmethod
    def _entry(tool: ToolsetTool[Any]) -> dict[str, Any]:
        schema = tool.tool_def.parameters_json_schema
        return {"name": tool.tool_def.name, "description": tool.tool_def.description or "",
                "parameters": schema, "order": list((schema.get("properties") or {}).keys())}

    async def _start(self, tools: Mapping[str, ToolsetTool[Any]]) -> Session:
        gated = [Tool(name=name, description=t.tool_def.description or "", parameters=t.tool_def.parameters_json_schema,
                      function=self._host_function(name), source=f"pydantic-ai {self.wrapped.label}",
                      default_decision="allow")  # handed over by the program that owns the agent
                 for name, t in tools.items()]
        # WORKAROUND until Session(tools=[Tool, ...]) (API.md) is merged: the tools as a registry of their own.
        session = Session(registry=ToolRegistry(gated), **dict(self.session_options))
        await session.start()
        try:
            if tools:
                names = ", ".join(sorted(tools))
                prelude = await session.execute(f"import asyncio\nfrom tools.aio import {names}")
                if not prelude.ok:
                    raise ConfigError(f"CellgateCodeMode: the tools could not be made top-level: {prelude.text}")
        except BaseException:
            await session.shutdown()
            raise
        return session

    def _host_function(self, name: str) -> Callable[..., Any]:
        state = self._state

        async def call(**args: Any) -> Any:
            # Runs on the host after the gate allowed the call: the wrapped tool, as the agent would call it.
            tool, wrapped, ctx = state.tools[name], state.wrapped, state.ctx
            if wrapped is None or ctx is None:
                raise RuntimeError(f"{name} was called outside a run_code cell")
            validated = tool.args_validator.validate_python(args)
            return to_jsonable_python(await wrapped.call_tool(name, validated, ctx, tool))

        call.__name__ = name
        return call
