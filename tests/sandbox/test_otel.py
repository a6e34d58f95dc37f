"""OpenTelemetry spans and metrics of a real sandboxed session, caught by the SDK's in-memory exporter and reader.

One session runs the Northwind program, a call the policy denies, calls with secret arguments and results (with
content capture on), and a tool that reports the trace context it runs in; it is closed before the tests look,
so its session span has ended. A second session, with content capture off (the default), fails in every way a
call or a cell can, with private text in each failure, and none of it may reach an exported span.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from agent_runs import run_agent
from conftest import NORTHWIND, SAMPLE_TOOLS, TOOLS
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cellgate.extensions.anthropic.testing import reply, text, tool_use
from cellgate.gate.testing import BlockingSession

KEY = "sk-live-0123456789abcdef"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
SENDER_TRACE = "5ce0e9a56015fec5aadfa328ae398115"
SENDER = f"00-{SENDER_TRACE}-ab3e8c7b4b2d9a10-01"  # an MCP request's trace, say, for one cell


def config(folder: Path, capture: bool = True) -> Path:
    northwind = (NORTHWIND / "cellgate.toml").read_text().replace('approver = "queue"', 'approver = "deny"')
    northwind = northwind.replace('modules = ["tools.py"]', f'modules = ["{NORTHWIND / "tools.py"}", '
                                  f'"{SAMPLE_TOOLS}", "{TOOLS / "traced.py"}"]')
    path = folder / "cellgate.toml"
    path.write_text(northwind + '\n[policy.tools.fetch_invoice]\ndecision = "allow"\nsecrets = ["api_key"]\n\n'
                    '[policy.tools.issue_token]\ndecision = "allow"\n\n'
                    '[policy.tools.outgoing_traceparent]\ndecision = "allow"\n\n'
                    '[otel]\nenabled = true\n' + ("capture_content = true\n" if capture else ""))
    return path


@pytest.fixture(scope="module")
def telemetry() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """The process's providers (set once per process): what an application that configured OpenTelemetry has."""
    spans, numbers = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[numbers]))
    if trace.get_tracer_provider() is not provider:
        pytest.fail("another test set this process's tracer provider first; run this module in a process of its own")
    return spans, numbers


@pytest.fixture(scope="module")
def run(telemetry, runsc, tmp_path_factory) -> dict[str, Any]:
    spans, numbers = telemetry
    folder = tmp_path_factory.mktemp("otel")
    before = len(spans.get_finished_spans())  # only this session's spans, whatever ran before it
    box = BlockingSession(config=config(folder), tools=[], notebook=folder / "run.ipynb", cwd=folder,
                          traceparent=CALLER).start()
    try:
        results = {
            "northwind": box.execute((NORTHWIND / "late_orders.py").read_text()),
            "denied": box.execute("tools.create_task('A-1', 'refund')"),
            "secrets": box.execute(f"print(tools.fetch_invoice('inv-1', {KEY!r}))\n"
                                   "print(tools.issue_token('ada')['token'])"),
            "traced": box.execute("print(tools.outgoing_traceparent())"),
            "sender": box._run(box.session.execute("print(tools.outgoing_traceparent())", None, SENDER)),
        }
        journal = box.session.notebook_path.with_name("run.journal.jsonl")
    finally:
        box.close()
    return {"results": results, "spans": list(spans.get_finished_spans())[before:],
            "metrics": numbers.get_metrics_data(),
            "journal": [json.loads(line) for line in journal.read_text().splitlines()]}


# Private text in each way a session can fail, and in a result: none of it may leave in a span without capture.
PRIVATE = {
    "invalid": ("print(tools.add('alice.private@example.com'))", "alice.private@example.com"),
    "failed": ("tools.explode('explode-private-reason')", "explode-private-reason"),
    "denied": ("tools.create_task('order-private-77', 'refund')", "order-private-77"),
    "cell": ("raise RuntimeError('cell-private-traceback')", "cell-private-traceback"),
    "output": ("print(tools.echo('echo-private-output'))", "echo-private-output"),
}


@pytest.fixture(scope="module")
def quiet(telemetry, run, runsc, tmp_path_factory) -> dict[str, Any]:
    """A session with ``capture_content`` off, the spans it exported and what each cell returned (after ``run``,
    whose metrics are the process's counters when it ended)."""
    spans, _ = telemetry
    folder = tmp_path_factory.mktemp("otel-quiet")
    allowed = "".join(f'[policy.tools.{name}]\ndecision = "allow"\n\n' for name in ("add", "explode", "echo"))
    path = config(folder, capture=False)
    path.write_text(path.read_text().replace("[otel]", allowed + "[otel]"))
    before = len(spans.get_finished_spans())
    box = BlockingSession(config=path, tools=[], notebook=folder / "run.ipynb", cwd=folder).start()
    try:
        results = {name: box.execute(code) for name, (code, _) in PRIVATE.items()}
    finally:
        box.close()
    return {"results": results, "spans": list(spans.get_finished_spans())[before:]}


def cell_span(run: dict[str, Any], name: str) -> ReadableSpan:
    """The span of the named cell, found through the trace its journal record names."""
    started = [r for r in run["journal"] if r["event"] == "cell-started"]
    span_id = started[list(run["results"]).index(name)]["trace"]["span_id"]
    (span,) = [s for s in run["spans"] if trace.format_span_id(s.context.span_id) == span_id]
    return span


def children(run: dict[str, Any], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in run["spans"] if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_northwind_is_one_session_one_cell_and_313_execute_tool_spans(run) -> None:
    northwind = run["results"]["northwind"]
    assert northwind.ok and northwind.stdout == "10000 312\n"
    (session,) = [s for s in run["spans"] if s.name == "cellgate session"]
    assert session.attributes["cellgate.sandbox.isolation"] == "gvisor"
    assert len(session.attributes["cellgate.policy.sha256"]) == 64
    assert trace.format_trace_id(session.context.trace_id) == CALLER_TRACE  # the caller's trace, continued
    assert session.parent is not None and trace.format_span_id(session.parent.span_id) == "00f067aa0ba902b7"
    cell = cell_span(run, "northwind")
    assert cell.parent.span_id == session.context.span_id
    assert cell.attributes["cellgate.cell.status"] == "ok"
    assert cell.attributes["cellgate.cell.kind"] == "code"
    assert cell.attributes["cellgate.cell.sha256"] == hashlib.sha256(
        (NORTHWIND / "late_orders.py").read_bytes()).hexdigest()
    calls = children(run, cell)
    assert len(calls) == 313 and all(s.name.startswith("execute_tool ") for s in calls)
    assert Counter(s.attributes["gen_ai.tool.name"] for s in calls) == {"list_orders": 1, "create_task": 312}
    by_id = {c.id: c for c in northwind.calls}
    for span in calls:
        record = by_id[span.attributes["gen_ai.tool.call.id"]]
        assert span.name == f"execute_tool {record.tool}"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["cellgate.decision"] == "allow" and span.attributes["cellgate.outcome"] == "ok"
        assert span.attributes["cellgate.rule"] == record.rule
        assert "error.type" not in span.attributes
        assert record.trace == {"trace_id": CALLER_TRACE, "span_id": trace.format_span_id(span.context.span_id)}
    rules = {s.attributes["gen_ai.tool.name"]: s.attributes["cellgate.rule"] for s in calls}
    assert rules == {"list_orders": "tools.list_orders.decision",
                     "create_task": "tools.create_task.rules[0] (follow-ups are routine)"}


def test_a_denied_call_carries_the_rule_the_approver_and_error_type(run) -> None:
    denied = run["results"]["denied"]
    assert denied.status == "error" and denied.calls[0].decision == "approval-denied"
    (span,) = children(run, cell_span(run, "denied"))
    assert span.attributes["error.type"] == "denied" and span.attributes["cellgate.outcome"] == "denied"
    assert span.attributes["cellgate.rule"] == "tools.create_task.decision"
    assert span.attributes["cellgate.decision"] == "approval-denied"
    assert span.attributes["cellgate.approver"] == "deny"
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.status.description.startswith("tool 'create_task' was denied")  # the message: content is captured
    (event,) = [e for e in span.events if e.name == "cellgate.approval"]
    assert event.attributes["cellgate.approver"] == "deny"
    # The wait is the record's, from asked to answered (a constant or a sign error would not match it).
    (call,) = [r["call"] for r in run["journal"] if r["event"] == "call-finished"
               and r["call"]["id"] == span.attributes["gen_ai.tool.call.id"]]
    asked, answered = (datetime.fromisoformat(call["approval"][k]) for k in ("requested", "answered"))
    assert event.attributes["cellgate.approval.wait_s"] == pytest.approx((answered - asked).total_seconds(), abs=1e-6)
    assert cell_span(run, "denied").attributes["error.type"] == "error"


def test_secrets_never_reach_spans_even_with_content_capture(run) -> None:
    shown = run["results"]["secrets"]
    assert shown.ok and shown.stdout.startswith("{'invoice_id': 'inv-1', 'total': 42}\n")
    fetch, issue = sorted(children(run, cell_span(run, "secrets")), key=lambda s: s.attributes["cellgate.call.seq"])
    arguments = json.loads(fetch.attributes["gen_ai.tool.call.arguments"])
    assert arguments["invoice_id"] == "inv-1" and arguments["api_key"]["redacted"] is True  # captured, as a digest
    assert json.loads(issue.attributes["gen_ai.tool.call.result"])["user"] == "ada"
    everything = json.dumps([[dict(s.attributes), [dict(e.attributes) for e in s.events], s.status.description]
                             for s in run["spans"]], default=str)
    assert KEY not in everything and "s3cr3t" not in everything


def test_the_tool_runs_in_its_calls_span_so_its_clients_continue_the_trace(run) -> None:
    traced = run["results"]["traced"]
    (span,) = children(run, cell_span(run, "traced"))
    sent = traced.stdout.strip()
    assert sent == f"00-{CALLER_TRACE}-{trace.format_span_id(span.context.span_id)}-01"


def test_a_cell_continues_the_trace_of_the_request_that_sent_it_linked_to_the_session(run) -> None:
    cell = cell_span(run, "sender")
    (session,) = [s for s in run["spans"] if s.name == "cellgate session"]
    assert trace.format_trace_id(cell.context.trace_id) == SENDER_TRACE
    assert trace.format_span_id(cell.parent.span_id) == "ab3e8c7b4b2d9a10"
    assert [link.context.span_id for link in cell.links] == [session.context.span_id]
    (call,) = children(run, cell)
    sent = run["results"]["sender"].stdout.strip()
    assert sent == f"00-{SENDER_TRACE}-{trace.format_span_id(call.context.span_id)}-01"


def test_the_journal_records_each_cells_and_calls_trace(run) -> None:
    started = [r for r in run["journal"] if r["event"] == "cell-started"]
    assert [r["trace"]["trace_id"] for r in started] == [CALLER_TRACE] * 4 + [SENDER_TRACE]
    finished = [r["call"] for r in run["journal"] if r["event"] == "call-finished"]
    assert [c["trace"]["trace_id"] for c in finished] == [CALLER_TRACE] * (313 + 1 + 2 + 1) + [SENDER_TRACE]
    sent = [r for r in run["journal"] if r["event"] == "cell-sent"]
    assert [r.get("traceparent") for r in sent] == [None] * 4 + [SENDER]
    ended = [r for r in run["journal"] if r["event"] == "cell-ended"]
    assert cell_span(run, "northwind").attributes["cellgate.journal.seq"] == ended[0]["seq"]


def test_metrics_count_calls_cells_and_sandbox_starts(run) -> None:
    points: dict[str, list[Any]] = {}
    for resource in run["metrics"].resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    calls = {(p.attributes["gen_ai.tool.name"], p.attributes["cellgate.decision"], p.attributes["cellgate.outcome"]):
             p.value for p in points["cellgate.calls"]}
    assert calls[("create_task", "allow", "ok")] == 312 and calls[("create_task", "approval-denied", "denied")] == 1
    durations = {p.attributes["gen_ai.tool.name"]: p.count for p in points["gen_ai.execute_tool.duration"]
                 if "error.type" not in p.attributes}
    assert durations["create_task"] == 312 and durations["list_orders"] == 1
    cells = {p.attributes["cellgate.cell.status"]: p.value for p in points["cellgate.cells"]}
    assert cells == {"ok": 4, "error": 1}
    (waiting,) = points["cellgate.approvals.waiting"]  # the denied call waited (+1), then was answered (-1)
    assert waiting.attributes == {"gen_ai.tool.name": "create_task"} and waiting.value == 0
    (start,) = points["cellgate.sandbox.starts"]
    assert start.value == 1 and start.attributes["cellgate.sandbox.start"] in ("snapshot", "cold")


def test_the_agent_loops_model_turns_are_chat_spans_with_token_usage(telemetry, run, runsc, tmp_path: Path) -> None:
    spans, _ = telemetry
    before = len(spans.get_finished_spans())
    config = f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n[policy]\ndefault = "allow"\n[otel]\nenabled = true\n'
    script = [reply(tool_use("execute_python", {"code": "print(tools.add(40, 2))"})), reply(text("42"))]
    agent, _, notebook = run_agent(tmp_path, script, config=config, tools=())
    assert agent.ended == "end_turn" and agent.final_text == "42"
    exported = list(spans.get_finished_spans())[before:]
    (session,) = [s for s in exported if s.name == "cellgate session"]
    mine = [s for s in exported if s.context.trace_id == session.context.trace_id]
    chats = sorted((s for s in mine if s.name == "chat claude-test"), key=lambda s: s.start_time)
    assert len(chats) == 2 and all(s.parent.span_id == session.context.span_id for s in chats)
    turns = json.loads(notebook.read_text())["metadata"]["cellgate"]["agent"]["turns"]
    for chat, turn in zip(chats, turns, strict=True):
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "anthropic"
        assert chat.attributes["gen_ai.usage.input_tokens"] == turn["usage"]["input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] == turn["usage"]["output_tokens"]
    assert chats[0].attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert [s.name for s in mine if s.name.startswith("execute_tool")] == ["execute_tool add"]


def test_without_content_capture_no_span_carries_arguments_error_text_or_results(quiet) -> None:
    results = quiet["results"]
    assert [results["invalid"].calls[0].error["kind"], results["failed"].calls[0].error["kind"],
            results["denied"].calls[0].decision] == ["invalid", "failed", "approval-denied"]
    assert "alice.private@example.com" in results["invalid"].calls[0].error["message"]  # the journal has it
    assert results["cell"].status == "error" and results["output"].stdout == "echo-private-output\n"
    (session,) = [s for s in quiet["spans"] if s.name == "cellgate session"]
    mine = [s for s in quiet["spans"] if s.context.trace_id == session.context.trace_id]
    exported = json.dumps([[s.name, dict(s.attributes), [[e.name, dict(e.attributes)] for e in s.events],
                            s.status.description] for s in mine], default=str)
    for name, (_, private) in PRIVATE.items():
        assert private not in exported, f"the {name} case's private text reached a span: {exported}"
    calls = {s.attributes["gen_ai.tool.name"]: s for s in mine if s.name.startswith("execute_tool ")}
    assert set(calls) == {"add", "explode", "create_task", "echo"}
    for span in calls.values():
        assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(span.attributes)
    for tool, kind in (("add", "invalid"), ("explode", "failed"), ("create_task", "denied")):
        span = calls[tool]  # the error's kind only: its type, as the status's description too
        assert span.attributes["error.type"] == kind
        assert (span.status.status_code, span.status.description) == (trace.StatusCode.ERROR, kind)
    assert not [e for s in mine for e in s.events if e.name == "exception"]
