"""``[otel]`` of cellgate.toml: whether and where a session sends OpenTelemetry traces and metrics.

Light on purpose (pydantic only): every load of cellgate.toml imports it,
OpenTelemetry is imported only by a session that traces.
"""

from __future__ import annotations

import os

from pydantic import Field

from cellgate.gate.ext import StrictModel

# Standard variables that ask for an exporter (the OpenTelemetry SDK's environment specification).
ASKING = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
          "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER")


class OtelSettings(StrictModel):
    """``[otel]``: with nothing set here, sessions trace when the standard ``OTEL_*`` variables ask them to."""

    enabled: bool | None = Field(default=None, description=(
        "true: trace every session; false: never; unset: when OTEL_EXPORTER_OTLP_ENDPOINT (or another standard "
        "OTEL_* exporter variable) is set and OTEL_SDK_DISABLED is not true"))
    endpoint: str | None = Field(default=None, description=(
        "OTLP/HTTP base URL, e.g. http://127.0.0.1:4318; default: OTEL_EXPORTER_OTLP_ENDPOINT, else the SDK's "
        "default. Unused when the application has set its own tracer provider"))
    service_name: str | None = Field(default=None, description="default: OTEL_SERVICE_NAME, else \"cellgate\"")
    capture_content: bool = Field(default=False, description=(
        "record tool arguments, results and error messages on execute_tool spans, as the audit journal keeps "
        "them (redacted, secrets as digests or markers); off by default: a span then carries no content, a "
        "failure only its error kind"))

    def wanted(self) -> bool:
        """Read at each session's start (the ``cellgate.gate.telemetry`` protocol)."""
        if self.enabled is not None:
            return self.enabled
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        return any(os.environ.get(name, "").strip() not in ("", "none") for name in ASKING)
