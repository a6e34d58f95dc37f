"""When a session is traced: ``[otel]`` and the standard OTEL_* variables; a caller's traceparent checked at the door.

Only the decision is tested here (no provider is installed in this process); what a traced session exports is
tested in tests/sandbox/test_otel.py and test_otel_otlp.py.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from cellgate.gate import Session
from cellgate.gate._errors import ConfigError, SessionError
from cellgate.gate.config import load_settings
from cellgate.gate.telemetry import NO_TELEMETRY, Telemetry, load_telemetry

OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
                  "OTEL_SDK_DISABLED")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def settings(tmp_path: Path, text: str = "") -> object:
    path = tmp_path / "cellgate.toml"
    path.write_text(text)
    return load_settings(path)


def test_nothing_configured_means_no_observer(tmp_path: Path) -> None:
    loaded = settings(tmp_path)
    assert loaded.otel.wanted() is False  # type: ignore[attr-defined]
    assert load_telemetry(loaded, {}) is NO_TELEMETRY


@pytest.mark.parametrize(("environment", "text", "wanted"), [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "", True),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, "", True),
    ({"OTEL_TRACES_EXPORTER": "none"}, "", False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, "", False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "[otel]\nenabled = false\n", False),
    ({}, "[otel]\nenabled = true\n", True),
])
def test_the_section_or_the_standard_variables_ask_for_tracing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                environment: dict[str, str], text: str,
                                                                wanted: bool) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert settings(tmp_path, text).otel.wanted() is wanted  # type: ignore[attr-defined]


def test_an_unknown_otel_key_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"otel\.capture"):
        settings(tmp_path, "[otel]\ncapture = true\n")


@pytest.mark.parametrize("value", ["", "00-abc-def-01", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                   "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                                   "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"])
def test_a_malformed_traceparent_is_refused_with_the_value_and_the_format(value: str) -> None:
    with pytest.raises(SessionError, match="is not a W3C traceparent") as caught:
        Session(traceparent=value)
    assert repr(value) in str(caught.value)


def test_a_traceparent_is_recorded_in_the_sessions_metadata() -> None:
    value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    session = Session(traceparent=value, metadata={"ticket": "T-1"})
    assert dict(session.launch_options.metadata) == {"ticket": "T-1", "traceparent": value}


def test_without_opentelemetry_an_explicit_ask_is_an_error_and_the_environment_only_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if the [otel] extra were not installed
    with pytest.raises(ConfigError, match=r"\[otel\] enabled = true, but OpenTelemetry is not installed .*"
                                          r"pip install 'cellgate\[otel\]'"):
        load_telemetry(settings(tmp_path, "[otel]\nenabled = true\n"), {})
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    with caplog.at_level(logging.WARNING, logger="cellgate"):
        observer = load_telemetry(settings(tmp_path), {})
    assert type(observer) is Telemetry
    assert "the OTEL_* environment asks for tracing, but OpenTelemetry is not installed" in caplog.text
