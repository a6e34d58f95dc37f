"""A tool that reports the trace context it runs in, as an instrumented HTTP client would send it."""

from __future__ import annotations


def outgoing_traceparent() -> str:
    """The traceparent header an instrumented client in this tool would send ("" when not traced)."""
    from opentelemetry import propagate

    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers.get("traceparent", "")
