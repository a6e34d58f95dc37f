"""The agent loop: the model writes programs, cellgate runs them sandboxed, gated and recorded.

Each API response is one turn. Its text becomes a markdown cell of the audit
notebook, with the turn's token usage; each ``execute_python`` tool use runs as
a code cell; each direct tool use runs through the same gate as a ``direct``
cell. Failures are data: a failed cell or a refused call goes back to the
model as an ``is_error`` tool result, with the writes the cell already made;
``retry: true`` sends the fixed cell as a retry of the failed one
(``Session.execute(retry=True)``). The loop ends on the model's own end of
turn, on the turn limit, on an API error (after the SDK's own retries) or on
``stop`` (Ctrl-C): then a running cell is interrupted, and the notebook says
how the run ended.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anthropic

from cellgate.gate import CellResult, Session, SessionError
from cellgate.gate.ext import ModelTurn

from . import events
from .config import AgentSettings
from .prompt import EXECUTE_PYTHON, RETRY_HINT, api_name, direct_definitions, split_tools, system_prompt
from .view import cell_view, trim

T = TypeVar("T")
Ending = Literal["end_turn", "max_turns", "interrupted", "api_error", "max_tokens", "refusal", "stop_sequence"]
Progress = Callable[[str], None]


class Stopped(Exception):
    """``stop`` was set while the loop waited."""


@dataclass
class AgentRun:
    """How a run ended, its turns, its summed token usage and the model's last text."""

    ended: Ending
    turns: int
    usage: dict[str, int] = field(default_factory=dict)
    final_text: str = ""
    detail: str | None = None
    requests: int = 0


def _usage(response: Any) -> dict[str, int]:
    usage = response.usage
    fields = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return {name: int(getattr(usage, name) or 0) for name in fields}


def _as_param(block: Any) -> dict[str, Any]:
    """An assistant content block, as the next request sends it back."""
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    return dict(block.model_dump(mode="json", exclude_none=True))


class AgentLoop:
    def __init__(self, session: Session, client: anthropic.AsyncAnthropic, settings: AgentSettings,
                 progress: Progress | None = None) -> None:
        self.session = session
        self.client = client
        self.settings = settings
        self.progress = progress or (lambda _: None)
        exposure = {entry["name"]: session.policy.exposure(entry["name"]) for entry in session.manifest}
        code_tools, direct_tools = split_tools(session.manifest, exposure, settings.mode)
        self.direct_names = {api_name(entry["name"]): entry["name"] for entry in direct_tools}
        self.system = system_prompt(code_tools, direct_tools, settings.search_threshold)
        self.tools = ([] if settings.mode == "direct" else [EXECUTE_PYTHON]) + direct_definitions(direct_tools)
        self._cells = 0

    async def count_prompt_tokens(self, task: str) -> int:
        """Tokens of the system prompt, tool definitions and task, by the API's count_tokens."""
        counted = await self.client.messages.count_tokens(
            model=self.settings.model, system=self.system, tools=self.tools,  # type: ignore[arg-type]
            messages=[{"role": "user", "content": task}])
        return int(counted.input_tokens)

    async def run(self, task: str, stop: asyncio.Event | None = None) -> AgentRun:
        stop = stop or asyncio.Event()
        recorder = self.session.recorder
        events.agent_started(recorder, task, self.settings.model, self.settings.mode)
        messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
        run = AgentRun(ended="max_turns", turns=0)
        try:
            for turn in range(1, self.settings.max_turns + 1):
                self.progress(f"turn {turn}: the model is thinking")
                started = time.time_ns()
                try:
                    response = await self._until(self.client.messages.create(
                        model=self.settings.model, max_tokens=self.settings.max_tokens, system=self.system,
                        tools=self.tools, messages=messages), stop)  # type: ignore[arg-type]
                except anthropic.APIError as exc:
                    recorder.telemetry.model_turn(ModelTurn("anthropic", self.settings.model, started, time.time_ns(),
                                                            error_type=type(exc).__name__))
                    raise
                run.turns, run.requests = turn, run.requests + 1
                usage = _usage(response)
                recorder.telemetry.model_turn(ModelTurn("anthropic", self.settings.model, started, time.time_ns(),
                                                        response.model, usage, response.stop_reason))
                for key, value in usage.items():
                    run.usage[key] = run.usage.get(key, 0) + value
                said = "\n\n".join(b.text for b in response.content if b.type == "text")
                run.final_text = said or run.final_text
                events.model_turn(recorder, turn, response.model, said, usage, response.stop_reason)
                messages.append({"role": "assistant", "content": [_as_param(b) for b in response.content]})
                uses = [b for b in response.content if b.type == "tool_use"]
                if not uses:
                    run.ended = response.stop_reason if response.stop_reason in (
                        "max_tokens", "refusal", "stop_sequence") else "end_turn"
                    break
                results = []
                for use in uses:
                    results.append(await self._answer(use, stop))
                messages.append({"role": "user", "content": results})
            else:
                run.detail = f"the model was still working after {self.settings.max_turns} turns (--max-turns)"
        except Stopped:
            run.ended, run.detail = "interrupted", "stopped by the operator (Ctrl-C)"
        except anthropic.APIError as exc:
            run.ended, run.detail = "api_error", f"{type(exc).__name__}: {exc}"[:1000]
        events.agent_ended(recorder, run.ended, run.turns, run.detail)
        return run

    async def _until(self, work: Awaitable[T], stop: asyncio.Event,
                     on_stop: Callable[[], Awaitable[None]] | None = None) -> T:
        """Await ``work`` unless ``stop`` is set first: then cancel it, or let ``on_stop`` wind it down."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if task.done():
            return task.result()
        if on_stop is None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        else:
            await on_stop()
            await task  # the cell ends (interrupted) and is recorded before the loop stops
        raise Stopped

    async def _answer(self, use: Any, stop: asyncio.Event) -> dict[str, Any]:
        if stop.is_set():
            raise Stopped
        if use.name == "execute_python" and "execute_python" in {t["name"] for t in self.tools}:
            return await self._run_cell(use, stop)
        if use.name in self.direct_names:
            return await self._call_direct(use)
        offered = ", ".join(t["name"] for t in self.tools)
        return _result(use.id, f"there is no tool named {use.name!r}; the tools are: {offered}", error=True)

    async def _run_cell(self, use: Any, stop: asyncio.Event) -> dict[str, Any]:
        code = use.input.get("code") if isinstance(use.input, dict) else None
        if not isinstance(code, str) or not code.strip():
            return _result(use.id, "execute_python needs {\"code\": \"<a Python program>\"}; "
                                   f"got {json.dumps(use.input)[:200]}", error=True)
        retry = use.input.get("retry", False)
        if not isinstance(retry, bool):
            return _result(use.id, f"execute_python's retry is true or false, not {json.dumps(retry)[:100]}; "
                                   "leave it out to run the code as a new cell", error=True)
        if self.session.dead:
            self.progress("restarting the sandboxed kernel")
            await self.session.restart()
        self._cells += 1
        self.progress(f"running cell {self._cells}" + (" (a retry of the last failed cell)" if retry else ""))
        try:
            if self.settings.writes == "plan" and not retry:
                planned = await self._planned_cell(use, code, stop)
                if isinstance(planned, dict):
                    return planned
                result = planned
            else:
                result = await self._until(self.session.execute(code, retry=retry), stop,
                                           on_stop=self.session.interrupt)
        except SessionError as exc:
            if not retry:
                raise
            # Refused before it ran (the last cell did not fail): the model's mistake, said to it as a tool error.
            return _result(use.id, f"execute_python with retry: true was refused, nothing ran: {exc}", error=True)
        where = f"the audit notebook {self.session.notebook_path.name}"
        content = cell_view(result, where, self.settings.output_budget, self.settings.image_limit_kb * 1024,
                            retry_hint=RETRY_HINT)
        return {"type": "tool_result", "tool_use_id": use.id, "content": content, "is_error": not result.ok}

    async def _planned_cell(self, use: Any, code: str, stop: asyncio.Event) -> CellResult | dict[str, Any]:
        """``[agent] writes = "plan"``: the cell planned in a fork first; when its writes need approval, the
        session's approver is asked once for all of them, then the plan is applied (or the model told no). A cell
        whose writes need nobody's approval simply runs."""
        plan = await self._until(self.session.plan(code), stop)  # cancelled, its fork ends
        if not any(write.decision == "approve" for write in plan.writes):
            return await self._until(self.session.execute(code), stop, on_stop=self.session.interrupt)
        self.progress(f"asking for one approval of the cell's {len(plan.writes)} planned writes")
        if not await self._until(self.session.ask(plan), stop):
            return _result(use.id, f"the cell's writes were planned, not made, and the plan was denied "
                                   f"({plan.reason or 'no reason given'}); nothing was written:\n{plan.table()}",
                           error=True)
        return await self._until(self.session.apply(plan), stop, on_stop=self.session.interrupt)

    async def _call_direct(self, use: Any) -> dict[str, Any]:
        args = use.input if isinstance(use.input, dict) else {}
        self.progress(f"calling {use.name}")
        outcome = await self.session.call_tool(self.direct_names[use.name], args)
        if not outcome.ok:
            assert outcome.error is not None
            return _result(use.id, f"{outcome.error_name}: {outcome.error['message']}", error=True)
        text = json.dumps(outcome.result, ensure_ascii=False)
        return _result(use.id, trim(text, self.settings.output_budget, f"the audit notebook "
                                                                       f"{self.session.notebook_path.name}"))


def _result(use_id: str, text: str, error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": [{"type": "text", "text": text}],
            "is_error": error}
