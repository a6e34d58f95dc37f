"""A session as OpenTelemetry spans and metrics (the GenAI semantic conventions' names where they have one).

One trace per session: the session's span (continuing a caller's
``traceparent``: ``Session(traceparent=...)`` or the ``TRACEPARENT``
variable), a span per cell under it, an ``execute_tool {tool}`` span per
gated call under its cell. A call's span carries the policy's own decision,
rule, approver and outcome (``cellgate.*``) and ``error.type`` when it failed;
the tool runs in the span's context. Arguments, results and error messages
are added only with ``[otel] capture_content = true``, and then as the journal
keeps them: redacted, secrets as digests or markers. Without it a span holds
no content anywhere (attributes, events, status): a failure is its error kind
(``cellgate.kernel.wire.ErrorKind``, a closed set) and nothing of its message,
which quotes argument values and the tool's own exception text.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from opentelemetry import context, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from cellgate.gate.ext import CallRecord, CallSpan, ModelTurn, Telemetry

from . import providers
from .config import OtelSettings

F = TypeVar("F", bound=Callable[..., Any])
CONTENT_CHARS = 16_384  # an attribute of captured content is cut here (backends drop larger ones)


def ids(span: Span) -> dict[str, str] | None:
    """The trace and span id as the journal records them (W3C hex), or None for a span that is not recorded."""
    found = span.get_span_context()
    if not found.is_valid:
        return None
    return {"trace_id": trace.format_trace_id(found.trace_id), "span_id": trace.format_span_id(found.span_id)}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)[:CONTENT_CHARS]


def _seconds_between(start: Any, end: Any) -> float | None:
    try:
        return max(0.0, (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds())
    except ValueError:
        return None


class OtelCall(CallSpan):
    """One gated call's ``execute_tool`` span."""

    def __init__(self, span: Span, instruments: providers.Instruments, capture: bool, origin: str) -> None:
        self.span, self.instruments, self.capture, self.origin = span, instruments, capture, origin
        self._ended = False

    def ids(self) -> dict[str, str] | None:
        return ids(self.span)

    def inside(self, function: F) -> F:
        within = trace.set_span_in_context(self.span)
        if inspect.iscoroutinefunction(function):
            @functools.wraps(function)
            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                token = context.attach(within)
                try:
                    return await function(*args, **kwargs)
                finally:
                    context.detach(token)
            return traced_async  # type: ignore[return-value]

        @functools.wraps(function)
        def traced(*args: Any, **kwargs: Any) -> Any:  # runs on a worker thread: the context is attached there
            token = context.attach(within)
            try:
                return function(*args, **kwargs)
            finally:
                context.detach(token)
        return traced  # type: ignore[return-value]

    def ended(self, record: CallRecord) -> None:
        if self._ended:
            return
        self._ended = True
        span = self.span
        error = record.error or {}
        outcome = "ok" if record.ok else str(error.get("kind") or "cancelled")
        approval = record.approval or {}
        span.set_attributes({
            "cellgate.call.seq": record.seq, "cellgate.decision": record.decision, "cellgate.outcome": outcome,
            **({"cellgate.rule": record.rule} if record.rule else {}),
            **({"cellgate.approver": str(approval["approver"])} if approval.get("approver") else {}),
        })
        if approval:
            waited = _seconds_between(approval.get("requested"), approval.get("answered") or approval.get("withdrawn"))
            span.add_event("cellgate.approval", {
                "cellgate.approver": str(approval.get("approver")), "cellgate.decision": record.decision,
                **({"cellgate.approval.wait_s": waited} if waited is not None else {})})
            if waited is not None:
                self.instruments.approval_wait.record(waited, {"gen_ai.tool.name": record.tool,
                                                               "cellgate.decision": record.decision})
        if self.capture:
            span.set_attribute("gen_ai.tool.call.arguments", _json(record.args))
            if record.ok:
                span.set_attribute("gen_ai.tool.call.result", _json(record.result))
        if not record.ok:
            span.set_attribute("error.type", outcome)
            described = str(error.get("message", outcome))[:1000] if self.capture else outcome
            span.set_status(Status(StatusCode.ERROR, described))
        span.end()
        common = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": record.tool}
        self.instruments.tool_duration.record(record.duration_ms / 1000, {
            **common, **({} if record.ok else {"error.type": outcome})})
        self.instruments.calls.add(1, {**common, "cellgate.decision": record.decision, "cellgate.outcome": outcome})


class OtelTelemetry(Telemetry):
    """A session's spans: the session's from its start to its end, a cell's, a call's."""

    def __init__(self, settings: OtelSettings, metadata: Mapping[str, Any]) -> None:
        self.capture = settings.capture_content
        self.tracer, self.instruments = providers.tracer_and_instruments(settings)
        self._propagator = TraceContextTextMapPropagator()
        carrier = metadata.get("traceparent") or os.environ.get("TRACEPARENT")
        parent = self._propagator.extract({"traceparent": str(carrier)}) if carrier else None
        sandbox, policy = (found if isinstance(found := metadata.get(key), dict) else {}
                           for key in ("sandbox", "policy"))
        attributes = {
            "cellgate.session.id": str(metadata.get("session_id", "")),
            "cellgate.sandbox.isolation": str(sandbox.get("isolation", "")),
            "cellgate.policy.sha256": str(policy.get("sha256", "")),
            **{f"cellgate.sandbox.{key}": str(sandbox[key]) for key in ("runtime", "runsc_version", "platform")
               if sandbox.get(key)},
        }
        self.session = self.tracer.start_span("cellgate session", context=parent, kind=SpanKind.INTERNAL,
                                              attributes=attributes)
        self._under_session = trace.set_span_in_context(self.session)
        self._cells: dict[int, tuple[object, Span, str]] = {}  # by id() of the recorder's cell (kept alive here)
        self._lock = threading.Lock()

    def cell_started(self, cell: object, source: str, kind: str,
                     traceparent: str | None = None) -> dict[str, str] | None:
        """Under the session's span; a cell its sender traced (an MCP request, ``Session.execute(traceparent=)``)
        continues the sender's trace instead, linked to the session's span."""
        attributes = {"cellgate.cell.kind": kind, "cellgate.cell.sha256": hashlib.sha256(source.encode()).hexdigest()}
        if traceparent:
            sender = self._propagator.extract({"traceparent": traceparent})
            span = self.tracer.start_span(f"cell {kind}", context=sender, attributes=attributes,
                                          links=[Link(self.session.get_span_context())])
        else:
            span = self.tracer.start_span(f"cell {kind}", context=self._under_session, attributes=attributes)
        with self._lock:
            self._cells[id(cell)] = (cell, span, kind)
        return ids(span)

    def cell_ended(self, cell: object, status: str, limits_hit: list[str], journal_seq: int) -> None:
        with self._lock:
            found = self._cells.pop(id(cell), None)
        if found is None:  # ended without having started (rejected before it ran): no span
            return
        _, span, kind = found
        span.set_attributes({"cellgate.cell.status": status, "cellgate.cell.limits_hit": list(limits_hit),
                             "cellgate.journal.seq": journal_seq})
        if status != "ok":
            span.set_attribute("error.type", status)
            span.set_status(Status(StatusCode.ERROR, f"the cell ended {status}"))
        span.end()
        self.instruments.cells.add(1, {"cellgate.cell.status": status, "cellgate.cell.kind": kind})

    def call_started(self, cell: object, tool: str, call_id: str, origin: str) -> CallSpan:
        with self._lock:
            found = self._cells.get(id(cell))
        parent = trace.set_span_in_context(found[1]) if found else self._under_session
        span = self.tracer.start_span(f"execute_tool {tool}", context=parent, kind=SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function", "cellgate.call.origin": origin})
        return OtelCall(span, self.instruments, self.capture, origin)

    def approvals_waiting(self, tool: str, change: int) -> None:
        self.instruments.approvals_waiting.add(change, {"gen_ai.tool.name": tool})

    def model_turn(self, turn: ModelTurn) -> None:
        """A ``chat {model}`` span under the session's, with the turn's token usage."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": turn.provider, "gen_ai.request.model": turn.model,
            **({"gen_ai.response.model": turn.response_model} if turn.response_model else {}),
            **({"gen_ai.response.finish_reasons": [turn.finish_reason]} if turn.finish_reason else {}),
            **{f"gen_ai.usage.{key}": int(value) for key, value in turn.usage.items()
               if key in ("input_tokens", "output_tokens")},
        }
        span = self.tracer.start_span(f"chat {turn.model}", context=self._under_session, kind=SpanKind.CLIENT,
                                      start_time=turn.started_ns, attributes=attributes)
        if turn.error_type:
            span.set_attribute("error.type", turn.error_type)
            span.set_status(Status(StatusCode.ERROR, turn.error_type))
        span.end(end_time=turn.ended_ns)
        common = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": turn.provider,
                  "gen_ai.request.model": turn.model}
        for kind in ("input", "output"):
            if f"{kind}_tokens" in turn.usage:
                self.instruments.token_usage.record(int(turn.usage[f"{kind}_tokens"]),
                                                    {**common, "gen_ai.token.type": kind})

    def sandbox_started(self, start: Mapping[str, Any]) -> None:
        kind = "snapshot" if "snapshot" in start else "cold" if "cold" in start else "unknown"
        self.session.add_event("cellgate.sandbox.started", {"cellgate.sandbox.start": kind})
        self.instruments.sandbox_starts.add(1, {"cellgate.sandbox.start": kind})

    def session_ended(self) -> None:
        with self._lock:
            open_cells, self._cells = list(self._cells.values()), {}
        for _, span, _kind in open_cells:  # the record ended under them (the host stopped)
            span.set_status(Status(StatusCode.ERROR, "the session ended while the cell ran"))
            span.end()
        self.session.end()
        providers.flush()
