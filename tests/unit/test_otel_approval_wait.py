"""The approval event of a call's span carries how long the person took, from the call's record.

The sandboxed OpenTelemetry test (tests/sandbox/test_otel.py) has only an instant `deny` approver, whose wait
rounds to nothing; here the record says 2.5 s, so a constant or a sign error in the wait cannot pass.
"""

from __future__ import annotations

from unittest import mock

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cellgate.extensions.otel.telemetry import OtelCall
from cellgate.gate.calls.record import CallRecord


@pytest.mark.parametrize(("answer", "waited"), [("answered", 2.5), ("withdrawn", 61.25)])
def test_the_approval_wait_is_from_asked_to_answered_or_withdrawn(answer: str, waited: float) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instruments = mock.Mock()
    call = OtelCall(provider.get_tracer("test").start_span("execute_tool refund"), instruments, False, "cell")
    asked = "2026-12-01T09:00:00.000000+00:00"
    told = {"answered": "2026-12-01T09:00:02.500000+00:00", "withdrawn": "2026-12-01T09:01:01.250000+00:00"}[answer]
    call.ended(CallRecord(seq=1, id="c-1", tool="refund", args={}, started=asked, decision="approved", ok=True,
                          approval={"approver": "queue:ada", "requested": asked, answer: told}))
    call.span.end()
    (span,) = spans.get_finished_spans()
    (event,) = [e for e in span.events if e.name == "cellgate.approval"]
    assert event.attributes["cellgate.approval.wait_s"] == waited
    instruments.approval_wait.record.assert_called_once_with(waited, {"gen_ai.tool.name": "refund",
                                                                      "cellgate.decision": "approved"})
