"""Direct tool calls: the model calls a tool on its own turn, not from code.

The call takes the same path (``dispatch``: admission, validation, policy,
approvals, budgets, journal) as a call from the sandbox, and is recorded as a cell of
kind ``direct`` whose source is the equivalent Python call, so the audit
notebook reads the same either way and ``cellgate replay`` reruns it in the
kernel against the recorded result.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic_core import to_jsonable_python

from cellgate.gate._errors import SessionError
from cellgate.gate.calls.dispatch import CallLog, CallScope, Dispatcher
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.record import CallRecord
from cellgate.kernel.errors import error_for

PREVIEW_CHARS = 4000


class DirectLog(CallLog, Protocol):
    """What records a direct call's cell: the session's ``Recorder`` (cells are its ``CellRecord``)."""

    def cell_sent(self, msg_id: str, source: str, silent: bool, kind: Literal["code", "direct"] = "code") -> Any: ...

    def cell_started(self, cell: Any) -> None: ...

    def output(self, cell: Any, output: dict[str, Any]) -> None: ...

    def cell_ended(self, cell: Any, status: Literal["ok", "error"], limits_hit: list[str],
                   error: dict[str, str] | None) -> None: ...


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
    # A result is kept as the tool returned it: a UUID or an Enum in it (JSON by their value) is shown as such.
    text = json.dumps(outcome.record.result, ensure_ascii=False, indent=1, default=to_jsonable_python)
    if len(text) > PREVIEW_CHARS:
        text = (text[:PREVIEW_CHARS] + f"\n… ({outcome.record.result_bytes} bytes in all; the call record "
                "holds the full result)")
    return {"output_type": "execute_result", "execution_count": None, "metadata": {},
            "data": {"text/plain": text}}


async def serve_direct(dispatcher: Dispatcher, recorder: DirectLog, tool: str, args: dict[str, Any]) -> DirectResult:
    """Run one direct call through the call path and record it as its own cell."""
    msg_id = f"direct-{uuid.uuid4().hex}"
    dispatcher.note_secret_args(tool, args)  # the cell's source is the call: its secret arguments are known now
    cell = recorder.cell_sent(msg_id, python_call(tool, args), silent=False, kind="direct")
    recorder.cell_started(cell)
    dispatcher.new_cell()
    scope = CallScope(cell=cell, msg_id=msg_id, key=msg_id, source=cell.source, origin="direct")
    request = CallRequest(id=msg_id, tool=tool, args=args)
    refused = dispatcher.admit(request, scope)
    if refused is not None:  # the journal broke: every call is refused (a direct call has no cell to wait in)
        raise SessionError(f"tool {tool!r} was not called: {(refused.reply.error or {}).get('message')}")
    outcome = await dispatcher.serve(request, scope)
    reply = outcome.reply
    result = DirectResult(ok=reply.ok, result=reply.result, error=reply.error, record=outcome.record)
    recorder.output(cell, _output(result))
    recorder.cell_ended(cell, "ok" if result.ok else "error", [], None if result.ok else {
        "ename": result.error_name, "evalue": (result.error or {}).get("message", "")})
    return result
