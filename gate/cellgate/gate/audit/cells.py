"""The cell model: what the audit notebook shows of one cell, built up from journal records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import nbformat
from nbformat.v4 import output_from_msg

from cellgate.gate.audit.journal import json_safe
from cellgate.gate.calls.dispatch import CallRecord

CellStatus = Literal["ok", "error", "interrupted", "timeout", "killed", "kernel-died", "memory", "rejected"]
# code: a program the kernel ran; direct: a tool the model called on its own turn
# (run by the gate, no kernel involved); markdown: text a reader is shown (a model's turn, a restart note);
# command: a program the session ran in the sandbox (``Session.run_command``), its argv in ``extra``.
CellKind = Literal["code", "direct", "markdown", "command"]


@dataclass
class CellRecord:
    msg_id: str
    source: str
    started: str
    silent: bool = False
    ended: str | None = None
    status: CellStatus | None = None
    execution_count: int | None = None
    outputs: list[Any] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # as the notebook lists them
    call_records: list[CallRecord] = field(default_factory=list)  # live objects, for the Session API
    pending_calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # started, not finished
    limits_hit: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None
    journal: dict[str, Any] | None = None  # seq and hash of the record that ended the cell
    version: int = 0  # bumped on every change, so a rendered cell can be cached
    serial: int = 0  # position in the run; msg_ids can repeat after a kernel restart
    kind: CellKind = "code"
    late_outputs: list[Any] = field(default_factory=list)  # from work the cell started, after it ended
    extra: dict[str, Any] = field(default_factory=dict)  # markdown cells: what their metadata.cellgate says
    refusals_dropped: dict[str, Any] | None = None  # refused calls past the cell's budget, summarised
    subshell: str | None = None  # the kernel subshell it ran on (None: the main shell)
    trace: dict[str, str] | None = None  # its trace and span id, when the session's observer traced it
    traceparent: str | None = None  # the trace of the request that sent it (execute_request metadata), if any

    def add_output(self, output: dict[str, Any]) -> None:
        if output.get("output_type") == "clear_output":
            self.outputs.clear()
            return
        last = self.outputs[-1] if self.outputs else None
        if (output.get("output_type") == "stream" and last is not None and last.get("output_type") == "stream"
                and last.get("name") == output.get("name")):
            last["text"] += output["text"]  # merge consecutive stream chunks, as Jupyter does
        else:
            self.outputs.append(nbformat.from_dict(output))


def output_dict(msg: dict[str, Any]) -> dict[str, Any]:
    """An IOPub output message as an nbformat output (clear_output as a marker)."""
    if msg["header"]["msg_type"] == "clear_output":
        return {"output_type": "clear_output"}
    return dict(output_from_msg(json_safe(msg)))


__all__ = ["CellKind", "CellRecord", "CellStatus", "output_dict"]
