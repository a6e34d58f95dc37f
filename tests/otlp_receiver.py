"""A local OTLP/HTTP receiver for tests: decodes what exporters POST (protobuf, as a collector does) and keeps it."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ROUTES: dict[str, tuple[type[Any], type[Any]]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
}


@dataclass
class Received:
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with its resource's attributes."""
        found = []
        for request in self.traces:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    found.extend((resource, span) for span in scope.spans)
        return found

    def metric_names(self) -> set[str]:
        return {metric.name for request in self.metrics for resource in request.resource_metrics
                for scope in resource.scope_metrics for metric in scope.metrics}


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """A receiver on a free local port: its base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``) and what it received."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            route = ROUTES.get(self.path)
            if route is None or self.headers.get("Content-Type") != "application/x-protobuf":
                received.problems.append(f"{self.path} {self.headers.get('Content-Type')}")
                self.send_response(404)
                self.end_headers()
                return
            request_type, response_type = route
            request = request_type.FromString(body)
            (received.traces if self.path == "/v1/traces" else received.metrics).append(request)
            answer = response_type().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
