"""Direct tool calls: the model calls a tool on its own turn, not from code.

The call goes through the same ``Gate`` (validation, policy, approvals,
budgets, journal) as a call from the sandbox, and is recorded as a cell of
kind ``direct`` whose source is the equivalent Python call, so the audit
notebook reads the same either way and ``cellgate replay`` reruns it in the
kernel against the recorded result.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.calls.dispatch import CallContext, CallRecord, Gate
from cellgate.gate.calls.protocol import CallRequest
from cellgate.kernel.errors import error_for

PREVIEW_CHARS = 4000


@dataclass(frozen=True)
class DirectResult:
    """The outcome of one direct call: the wire reply and the record the notebook has."""

    ok: bool
    result: Any
    error: dict[str, str] | None
    record: CallRecord

    @property
    def error_name(self) -> str:
        """The exception the same failure raises in a cell, e.g. ``ToolDenied``."""
        assert self.error is not None
        return type(error_for(self.error["kind"], self.record.tool, self.error["message"])).__name__


def python_call(tool: str, args: dict[str, Any]) -> str:
    """The program a cell would run to make this call (JSON values repr as Python literals)."""
    return f"tools.{tool}(" + ", ".join(f"{name}={value!r}" for name, value in args.items()) + ")"


def _output(outcome: DirectResult) -> dict[str, Any]:
    if not outcome.ok:
        assert outcome.error is not None
        return {"output_type": "error", "ename": outcome.error_name, "evalue": outcome.error["message"],
                "traceback": [f"{outcome.error_name}: {outcome.error['message']}"]}
    text = json.dumps(outcome.record.result, ensure_ascii=False, indent=1)
    if len(text) > PREVIEW_CHARS:
        text = (text[:PREVIEW_CHARS] + f"\n… ({outcome.record.result_bytes} bytes in all; the call record "
                "holds the full result)")
    return {"output_type": "execute_result", "execution_count": None, "metadata": {},
            "data": {"text/plain": text}}


async def serve_direct(gate: Gate, recorder: Recorder, tool: str, args: dict[str, Any]) -> DirectResult:
    """Run one direct call through the gate and record it as its own cell."""
    msg_id = f"direct-{uuid.uuid4().hex}"
    gate.note_secret_args(tool, args)  # the cell's source is the call: its secret arguments are known now
    cell = recorder.cell_sent(msg_id, python_call(tool, args), silent=False, kind="direct")
    recorder.cell_started(cell)
    gate.new_cell()
    seq = gate.next_seq()
    context = CallContext(cell_source=cell.source, origin="direct",
                          intent=lambda record: recorder.call_started(cell, record),
                          idempotency_key=f"{gate.session_id}/{msg_id}/{seq}")
    request = CallRequest(id=msg_id, tool=tool, args=args)
    reply, record = await gate.call(request, seq, context)
    recorder.call_finished(cell, record)
    outcome = DirectResult(ok=bool(reply["ok"]), result=reply.get("result"), error=reply.get("error"), record=record)
    recorder.output(cell, _output(outcome))
    recorder.cell_ended(cell, "ok" if outcome.ok else "error", [], None if outcome.ok else {
        "ename": outcome.error_name, "evalue": (outcome.error or {}).get("message", "")})
    return outcome
