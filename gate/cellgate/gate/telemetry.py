"""What a session tells an observer (traces, metrics), and how the observer is found.

The core imports no observability library. The recorder and the dispatcher
tell a ``Telemetry`` what happens (cells start and end, calls start and end:
the dispatcher through ``calls.observer``, so the calls room never imports this,
sandboxes start, the session ends); the default one does nothing, so a
session without an observer pays one method call per event.

An observer is an entry point of the ``cellgate.telemetry`` group, named
after its ``cellgate.toml`` section (``otel`` -> ``[otel]``). It is loaded,
once per session, only when that section's model says it is wanted
(``TelemetrySection.wanted``: configured in the file or through the
environment); its factory is called as ``factory(settings, session_metadata)``.

Everything an observer is handed is what the journal records: arguments and
results already redacted and scrubbed of the session's secrets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cellgate.gate._entry_points import entry_points
from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.observer import NO_CALL as NO_CALL
from cellgate.gate.calls.observer import CallSpan as CallSpan

TELEMETRY_GROUP = "cellgate.telemetry"
# W3C Trace Context, version 00: version-trace_id-parent_id-flags (lowercase hex, ids not all zeros).
TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")


@runtime_checkable
class TelemetrySection(Protocol):
    """A ``cellgate.toml`` section that can ask for its observer."""

    def wanted(self) -> bool:
        """Whether the observer should run (read at session start: the file, then the environment)."""
        ...


@dataclass(frozen=True)
class ModelTurn:
    """One request to a model and its answer, as an agent loop tells it (times: ``time.time_ns()``)."""

    provider: str  # e.g. "anthropic"
    model: str  # the model requested
    started_ns: int
    ended_ns: int
    response_model: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)  # input_tokens, output_tokens, ...
    finish_reason: str | None = None
    error_type: str | None = None  # the failure's class name, when the request failed




class Telemetry:
    """Told what a session does; this one does nothing. Methods are called from the session's relay thread
    (and ``session_ended`` from whichever thread ends the record); none may raise."""

    def cell_started(self, cell: object, source: str, kind: str,
                     traceparent: str | None = None) -> dict[str, str] | None:
        """A cell (``cell``: the recorder's record, the key for the other calls) started; the trace and
        span id the journal records with it, or None. ``traceparent``: the trace of the request that sent the cell
        (checked against ``TRACEPARENT``), if it named one."""
        return None

    def cell_ended(self, cell: object, status: str, limits_hit: list[str], journal_seq: int) -> None:
        """The cell ended; ``journal_seq`` is the journal record that ended it."""

    def call_started(self, cell: object, tool: str, call_id: str, origin: str) -> CallSpan:
        """A call the dispatcher admitted, attributed to ``cell``."""
        return NO_CALL

    def approvals_waiting(self, tool: str, change: int) -> None:
        """A call of ``tool`` starts (+1) or stops (-1) waiting for a person's answer (called by the dispatcher)."""

    def model_turn(self, turn: ModelTurn) -> None:
        """An agent loop's model turn ended (called by the loop, e.g. ``cellgate run``)."""

    def sandbox_started(self, start: Mapping[str, Any]) -> None:
        """A sandbox started (``start``: the sandbox's ``start`` description: snapshot or cold)."""

    def session_ended(self) -> None:
        """The record ended: flush what is buffered."""


NO_TELEMETRY = Telemetry()


def is_traceparent(value: object) -> bool:
    return isinstance(value, str) and TRACEPARENT.match(value) is not None


def load_telemetry(settings: object, metadata: Mapping[str, Any]) -> Telemetry:
    """The observer the settings (or the environment) ask for; ``NO_TELEMETRY`` when none does."""
    for entry in sorted(entry_points(group=TELEMETRY_GROUP), key=lambda e: e.name):
        section = getattr(settings, entry.name, None)
        if not isinstance(section, TelemetrySection) or not section.wanted():
            continue
        factory = entry.load()
        telemetry = factory(settings, metadata)
        if not isinstance(telemetry, Telemetry):
            raise ConfigError(f"entry point {entry.name} = {entry.value!r} (group {TELEMETRY_GROUP}) returned a "
                              f"{type(telemetry).__name__}, not a cellgate Telemetry; fix or uninstall the package "
                              "that provides it")
        return telemetry
    return NO_TELEMETRY


__all__ = ["NO_CALL", "NO_TELEMETRY", "TELEMETRY_GROUP", "TRACEPARENT", "CallSpan", "ModelTurn", "Telemetry",
           "TelemetrySection", "is_traceparent", "load_telemetry"]
