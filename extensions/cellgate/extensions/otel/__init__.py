"""OpenTelemetry traces and metrics of cellgate sessions (``pip install 'cellgate[otel]'``).

Registered as the ``otel`` entry point of ``cellgate.telemetry`` and as the
``[otel]`` section of cellgate.toml (``config``). The core loads ``telemetry``
only when the section or the standard ``OTEL_*`` environment asks for it.
"""
