"""OpenTelemetry traces and metrics of cellgate sessions (``pip install 'cellgate[otel]'``).

Registered as the ``otel`` entry point of ``cellgate.telemetry`` (``start``) and as the ``[otel]`` section of
cellgate.toml (``config``). The core calls ``start`` only when the section or the standard ``OTEL_*`` environment
asks for tracing; this module stays light (OpenTelemetry is imported by ``start``), as config sections are
loaded with every cellgate.toml.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from cellgate.gate import ConfigError, Settings
from cellgate.gate.ext import Telemetry

from .config import OtelSettings


def start(settings: Settings, metadata: Mapping[str, Any]) -> Telemetry:
    """A session's observer. Without OpenTelemetry installed: an error when ``[otel] enabled = true`` asks for it,
    a warning and no tracing when only the environment's ``OTEL_*`` variables do (they may be meant for others)."""
    section = settings.section("otel", OtelSettings)
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401 (installed?)
        import opentelemetry.sdk.trace  # noqa: F401

        from .telemetry import OtelTelemetry
    except ImportError as exc:
        if section.enabled:
            raise ConfigError(f"[otel] enabled = true, but OpenTelemetry is not installed ({exc}); install it with "
                              "pip install 'cellgate[otel]', or remove [otel] enabled") from None
        logging.getLogger("cellgate").warning(
            "the OTEL_* environment asks for tracing, but OpenTelemetry is not installed (%s): this session is not "
            "traced; pip install 'cellgate[otel]' to trace it", exc)
        return Telemetry()
    return OtelTelemetry(section, metadata)


__all__ = ["start"]
