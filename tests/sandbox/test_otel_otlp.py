"""End to end: `cellgate exec` and `cellgate mcp serve`, configured only by the standard OTEL_* variables, export
their traces and metrics over OTLP/HTTP (protobuf) to a local receiver, continuing the caller's trace (TRACEPARENT,
an MCP request's _meta); `cellgate show` and `report` print the trace id."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from conftest import CELLGATE, SAMPLE_TOOLS, cellgate
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from otlp_receiver import otlp_receiver

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def exported(runsc, tmp_path_factory):
    folder = tmp_path_factory.mktemp("otlp")
    notebook = folder / "run.ipynb"
    with otlp_receiver() as (endpoint, received):
        done = cellgate("exec", "-", "--tools", str(SAMPLE_TOOLS), "--notebook", str(notebook),
                        stdin="print(tools.echo('hello'))\n", cwd=folder, env={
                            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "cellgate-e2e",
                            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
                            "TRACEPARENT": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"
    return {"received": received, "notebook": notebook, "folder": folder}


def test_spans_arrive_over_otlp_http_in_the_callers_trace(exported) -> None:
    received = exported["received"]
    assert received.problems == []
    spans = {span.name: (resource, span) for resource, span in received.spans()}
    assert set(spans) == {"cellgate session", "cell code", "execute_tool echo"}
    resource, session = spans["cellgate session"]
    assert resource["service.name"] == "cellgate-e2e" and resource["deployment.environment.name"] == "test"
    assert session.trace_id.hex() == CALLER_TRACE and session.parent_span_id.hex() == CALLER_SPAN
    _, cell = spans["cell code"]
    _, call = spans["execute_tool echo"]
    assert cell.parent_span_id == session.span_id and call.parent_span_id == cell.span_id
    assert {span.trace_id.hex() for _, span in spans.values()} == {CALLER_TRACE}
    attributes = {a.key: a.value for a in call.attributes}
    assert attributes["gen_ai.operation.name"].string_value == "execute_tool"
    assert attributes["gen_ai.tool.name"].string_value == "echo"
    assert attributes["cellgate.decision"].string_value == "allow"
    assert "gen_ai.tool.call.arguments" not in attributes  # content capture is off by default


def test_metrics_arrive_over_otlp_http(exported) -> None:
    names = exported["received"].metric_names()
    assert {"gen_ai.execute_tool.duration", "cellgate.calls", "cellgate.cells", "cellgate.sandbox.starts"} <= names


def test_show_and_report_print_the_trace_id(exported) -> None:
    notebook: Path = exported["notebook"]
    shown = cellgate("show", str(notebook))
    assert shown.returncode == 0, shown.stderr
    assert CALLER_TRACE in shown.stdout
    as_json = cellgate("show", "--json", str(notebook))
    assert as_json.returncode == 0, as_json.stderr
    assert CALLER_TRACE in json.dumps(json.loads(as_json.stdout))
    report = exported["folder"] / "report.html"
    done = cellgate("report", str(notebook), "-o", str(report))
    assert done.returncode == 0, done.stderr
    assert CALLER_TRACE in report.read_text()


def test_the_traced_record_verifies(exported) -> None:
    done = cellgate("verify", str(exported["notebook"]))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_cell_run_for_an_mcp_request_continues_the_requests_trace(runsc, tmp_path: Path) -> None:
    """The official MCP client sends its trace in the request's _meta (SEP-414); `cellgate mcp serve`, traced by
    the OTEL_* variables alone, runs the cell in that trace."""
    request_trace = "1f2e3d4c5b6a79881f2e3d4c5b6a7988"
    caller = NonRecordingSpan(SpanContext(int(request_trace, 16), 0x1122334455667788, is_remote=True,
                                          trace_flags=TraceFlags(TraceFlags.SAMPLED)))
    with otlp_receiver() as (endpoint, received):
        server = StdioServerParameters(
            command=CELLGATE[0], args=[*CELLGATE[1:], "mcp", "serve", "--tools", str(SAMPLE_TOOLS)], cwd=str(tmp_path),
            env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "CELLGATE_CONFIG": ""})

        async def scenario() -> str:
            async with Client(server) as client:
                with trace.use_span(caller):
                    result = await client.call_tool("execute_python", {"code": "print(tools.echo('traced'))"})
                # Closed by request: the session's end flushes its spans (a stdio server is not waited for).
                await client.call_tool("close_session", {"session": result.structured_content["session"]})
            return "".join(block.text for block in result.content if block.type == "text")

        assert asyncio.run(scenario()).strip() == "traced"
    cells = [span for _, span in received.spans() if span.name == "cell code"]
    assert len(cells) == 1 and cells[0].trace_id.hex() == request_trace
    (session,) = [span for _, span in received.spans() if span.name == "cellgate session"]
    assert [link.span_id for link in cells[0].links] == [session.span_id]
    (call,) = [span for _, span in received.spans() if span.name == "execute_tool echo"]
    assert call.trace_id.hex() == request_trace and call.parent_span_id == cells[0].span_id
