"""The tracer and meter a session uses: the application's, or an OTLP/HTTP pipeline set up once per process.

A program that configured OpenTelemetry itself (set a tracer provider) keeps
its own pipeline: cellgate's spans go where the program's go. Otherwise the
first traced session installs the SDK's providers globally (so a tool's own
instrumented HTTP client exports through the same pipeline), exporting over
OTLP/HTTP to ``[otel] endpoint`` or the standard ``OTEL_EXPORTER_OTLP_*``
variables; ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the
service as usual.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace

from .config import OtelSettings

SCOPE = "cellgate"
FLUSH_MS = 5000  # at a session's end: long enough for a local collector, short enough not to hold a shutdown
_lock = threading.Lock()


@dataclass(frozen=True)
class Instruments:
    """The metrics a session records (names: the GenAI semantic conventions, then cellgate's own)."""

    tool_duration: Any  # histogram, s
    calls: Any  # counter by tool, decision, outcome
    cells: Any  # counter by status and kind
    sandbox_starts: Any  # counter by kind: snapshot or cold
    approval_wait: Any  # histogram, s
    approvals_waiting: Any  # up-down counter by tool
    token_usage: Any  # histogram, {token}, by gen_ai.token.type


def _install(settings: OtelSettings) -> None:
    """The SDK's providers with OTLP/HTTP exporters, as the process's global ones."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes: dict[str, str] = {}
    if settings.service_name:
        attributes["service.name"] = settings.service_name
    elif not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "cellgate"
    resource = Resource.create(attributes)  # adds OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    base = settings.endpoint.rstrip("/") if settings.endpoint else None
    spans = OTLPSpanExporter(endpoint=f"{base}/v1/traces") if base else OTLPSpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(spans))
    trace.set_tracer_provider(tracer_provider)
    numbers = OTLPMetricExporter(endpoint=f"{base}/v1/metrics") if base else OTLPMetricExporter()
    metrics.set_meter_provider(MeterProvider(resource=resource,
                                             metric_readers=[PeriodicExportingMetricReader(numbers)]))


def tracer_and_instruments(settings: OtelSettings) -> tuple[trace.Tracer, Instruments]:
    with _lock:
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):  # nobody set one up yet
            _install(settings)
    meter = metrics.get_meter(SCOPE)
    return trace.get_tracer(SCOPE), Instruments(
        tool_duration=meter.create_histogram("gen_ai.execute_tool.duration", unit="s",
                                             description="Duration of gated tool calls, decision and approval "
                                                         "included"),
        calls=meter.create_counter("cellgate.calls", unit="{call}", description="Gated tool calls by tool, "
                                                                                 "decision and outcome"),
        cells=meter.create_counter("cellgate.cells", unit="{cell}", description="Cells by status and kind"),
        sandbox_starts=meter.create_counter("cellgate.sandbox.starts", unit="{start}",
                                            description="Sandboxes started, by kind: snapshot or cold"),
        approval_wait=meter.create_histogram("cellgate.approval.wait", unit="s",
                                             description="Time a call waited for a person's answer"),
        approvals_waiting=meter.create_up_down_counter("cellgate.approvals.waiting", unit="{call}",
                                                       description="Calls waiting for a person's answer now"),
        token_usage=meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                           description="Tokens of the agent loop's model turns"),
    )


def flush() -> None:
    """Export what is buffered (the providers in use, whoever set them up)."""
    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        force_flush = getattr(provider, "force_flush", None)
        if callable(force_flush):
            force_flush(FLUSH_MS)
