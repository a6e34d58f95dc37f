"""Parsing what arrives from the sandbox: hostile by assumption.

One strict JSON decoder for every message from the kernel (installed as the
host ``jupyter_client.Session`` unpacker, so pickle is never possible) and one
validator for tool-call requests. Every rejection is a ``ProtocolError`` with
a message fit for the journal and for the error reply. ``CallReply`` is what
goes back (``wire`` module docstring), and ``error_reply`` the one builder of
a refusal; ``CallFailed`` carries a typed failure to it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from cellgate.gate._errors import ProtocolError
from cellgate.kernel.wire import MAX_BATCH_CALLS, MAX_REQUEST_BYTES, OP_BATCH, OP_CALL, RESULT_FRAME_BYTES, ErrorKind

__all__ = ["CallFailed", "CallReply", "CallRequest", "ProtocolError", "batch_items", "error_reply", "parse_call",
           "strict_loads"]

MAX_DEPTH = 64
_ID = re.compile(r"^[0-9a-f]{8,64}$")
_TOOL = re.compile(r"^[A-Za-z][A-Za-z0-9_.]{0,127}$")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ProtocolError(f"duplicate key {key[:64]!r} in a JSON object")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ProtocolError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ProtocolError(f"number {text[:40]} is out of range")
    return value


def _check_depth(text: str) -> None:
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ProtocolError(f"JSON nested deeper than {MAX_DEPTH} levels")
        elif char in "]}":
            depth -= 1


def strict_loads(data: bytes | str) -> Any:
    """Decode JSON strictly: no duplicate keys, no NaN/Infinity, bounded depth."""
    try:
        text = bytes(data).decode("utf-8") if isinstance(data, (bytes, bytearray, memoryview)) else data
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"invalid JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if text.count("[") + text.count("{") > MAX_DEPTH:
        _check_depth(text)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants,
                          parse_float=_finite_float)
    except ProtocolError:
        raise
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"invalid JSON: {str(exc)[:200]}") from None


@dataclass(frozen=True)
class CallRequest:
    id: str
    tool: str
    args: dict[str, Any]
    line: int | None = None  # the cell line the kernel says issued the call (a claim, for provenance)
    cell: str | None = None  # the msg_id of the cell the kernel says started the calling code (a claim)
    thread: str | None = None  # the name of the kernel thread that made the call (a claim)


class CallFailed(Exception):
    """A call that ends without a result: its kind and message become the error reply."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


@dataclass(frozen=True)
class CallReply:
    """The answer to one call: a result, or an error of a ``wire.ErrorKind`` with its message."""

    id: str
    ok: bool
    result: Any = None
    error: dict[str, str] | None = None
    encoded: bytes | None = field(default=None, repr=False)  # the result's JSON, made once by the gate
    planned: bool = False  # a planned write (``calls.plans``): the kernel answers it with a placeholder

    def wire(self, frames: list[bytes] | None = None) -> dict[str, Any]:
        """The reply as the kernel reads it; a large result goes into ``frames`` (the message's binary buffers) as
        its JSON, not into the message's own JSON, which would encode it again."""
        if self.planned:
            return {"id": self.id, "ok": True, "planned": True}
        if self.ok:
            if frames is not None and self.encoded is not None and len(self.encoded) >= RESULT_FRAME_BYTES:
                frames.append(self.encoded)
                return {"id": self.id, "ok": True, "result_frame": len(frames) - 1}
            return {"id": self.id, "ok": True, "result": self.result}
        return {"id": self.id, "ok": False, "error": self.error}


def error_reply(call_id: str, kind: ErrorKind, message: str) -> CallReply:
    """The one way a call is refused or failed on the wire."""
    return CallReply(id=call_id, ok=False, error={"kind": kind, "message": message})


def batch_items(data: Any, size: int) -> list[Any] | None:
    """The calls of a batch request, each still to be parsed on its own; None if ``data`` is not a batch."""
    if not isinstance(data, dict) or data.get("op") != OP_BATCH:
        return None
    if size > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request of {size} bytes exceeds the {MAX_REQUEST_BYTES} byte limit")
    if set(data) != {"op", "calls"}:
        raise ProtocolError(f"a batch has exactly the fields ['calls', 'op'], got {sorted(data)[:8]}")
    calls = data["calls"]
    if not isinstance(calls, list) or not 0 < len(calls) <= MAX_BATCH_CALLS:
        count = len(calls) if isinstance(calls, list) else type(calls).__name__
        raise ProtocolError(f"a batch holds 1 to {MAX_BATCH_CALLS} calls, got {count}")
    return calls


def parse_call(data: Any, size: int) -> CallRequest:
    """Validate a tool-call request (``wire`` module docstring) or raise ProtocolError."""
    if size > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request of {size} bytes exceeds the {MAX_REQUEST_BYTES} byte limit")
    if not isinstance(data, dict):
        raise ProtocolError(f"request must be a JSON object, got {type(data).__name__}")
    if data.get("op") == OP_BATCH:  # batch_items took the outer one
        raise ProtocolError("a batch inside a batch is not allowed; put its calls in the outer batch")
    if data.get("op") != OP_CALL:
        raise ProtocolError(f"unknown op {str(data.get('op'))[:64]!r}; the ops are {OP_CALL!r} and {OP_BATCH!r}")
    unknown = set(data) - {"op", "id", "tool", "args", "line", "cell", "thread"}
    if unknown:
        raise ProtocolError(f"unknown request fields {sorted(unknown)[:8]}")
    call_id, tool, args = data.get("id"), data.get("tool"), data.get("args")
    if not isinstance(call_id, str) or not _ID.match(call_id):
        raise ProtocolError(f"request id {str(call_id)[:80]!r} must be 8-64 lowercase hex digits")
    if not isinstance(tool, str) or not _TOOL.match(tool):
        raise ProtocolError(f"tool name {str(tool)[:80]!r} is not a valid tool name")
    if not isinstance(args, dict):
        raise ProtocolError(f"args of {tool!r} must be a JSON object, got {type(args).__name__}")
    try:
        json.dumps(args, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"args of {tool!r} hold a lone surrogate, which is not valid Unicode") from None
    line = data.get("line")
    if line is not None and (not isinstance(line, int) or isinstance(line, bool) or not 0 < line < 1_000_000):
        raise ProtocolError(f"line {str(line)[:20]!r} must be a positive integer")
    cell = data.get("cell")
    if cell is None:
        raise ProtocolError(f"call of {tool!r} names no cell (field 'cell'); a call must come from a running cell")
    if not isinstance(cell, str) or not 0 < len(cell) <= 128:
        raise ProtocolError(f"cell {str(cell)[:20]!r} must be a message id of at most 128 characters")
    thread = data.get("thread")
    if thread is not None and (not isinstance(thread, str) or len(thread) > 128):
        raise ProtocolError(f"thread {str(thread)[:20]!r} must be a name of at most 128 characters")
    return CallRequest(id=call_id, tool=tool, args=args, line=line, cell=cell, thread=thread)
