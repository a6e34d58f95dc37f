"""The gate: decides, validates, runs and times every tool call.

``Gate.call`` is the one door between the sandbox and the operator's tools.
It only runs configured tools, validates arguments host-side with jsonschema
(the exact object that was validated is the one passed to the tool), runs the
tool with a deadline, and turns every failure into a typed error reply whose
message carries no host traceback.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import itertools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import jsonschema
import pydantic_core

from cellgate.kernel.wire import ErrorKind

from .protocol import CallRequest
from .tools import ToolRegistry

PREVIEW_CHARS = 200


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass
class CallRecord:
    """One gated call as the audit notebook lists it."""

    seq: int
    id: str
    tool: str
    args: dict[str, Any]
    started: str
    decision: str = "allow"
    ok: bool = False
    result: Any = None
    error: dict[str, str] | None = None
    result_sha256: str | None = None
    result_bytes: int | None = None
    duration_ms: float = 0.0
    inline_result: bool = field(default=True, repr=False)

    def as_metadata(self, inline_limit: int) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "seq": self.seq,
            "id": self.id,
            "tool": self.tool,
            "args": self.args,
            "decision": self.decision,
            "ok": self.ok,
            "started": self.started,
            "duration_ms": round(self.duration_ms, 3),
        }
        if self.ok:
            entry["result_sha256"] = self.result_sha256
            entry["result_bytes"] = self.result_bytes
            text = canonical_json(self.result)
            if len(text) <= inline_limit:
                entry["result"] = self.result
            else:
                entry["result_preview"] = text[:PREVIEW_CHARS]
        else:
            entry["error"] = self.error
        return entry


class CallFailed(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Gate:
    """Serves the tool calls of one session."""

    def __init__(self, registry: ToolRegistry, call_timeout: float = 30.0, max_workers: int = 8) -> None:
        self.registry = registry
        self.call_timeout = call_timeout
        self._seq = itertools.count(1)
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="cellgate-tool")
        self._validators = {
            name: jsonschema.Draft202012Validator(tool.parameters)
            for name in registry.names()
            if (tool := registry.get(name)) is not None
        }

    def next_seq(self) -> int:
        return next(self._seq)

    async def call(self, request: CallRequest, seq: int) -> tuple[dict[str, Any], CallRecord]:
        """Run one call; returns the wire reply and the record of it."""
        record = CallRecord(seq=seq, id=request.id, tool=request.tool, args=request.args, started=utcnow())
        start = time.perf_counter()
        try:
            result = await self._run(request)
        except CallFailed as failure:
            record.error = {"kind": failure.kind, "message": failure.message}
            reply: dict[str, Any] = {"id": request.id, "ok": False, "error": record.error}
        else:
            text = canonical_json(result)
            record.ok, record.result = True, result
            record.result_bytes = len(text.encode())
            record.result_sha256 = hashlib.sha256(text.encode()).hexdigest()
            reply = {"id": request.id, "ok": True, "result": result}
        record.duration_ms = (time.perf_counter() - start) * 1000
        return reply, record

    async def _run(self, request: CallRequest) -> Any:
        tool = self.registry.get(request.tool)
        if tool is None:
            known = ", ".join(self.registry.names()) or "none"
            raise CallFailed("not_found", f"no tool named {request.tool!r} in this session; the tools are: {known}")
        error = jsonschema.exceptions.best_match(self._validators[tool.name].iter_errors(request.args))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
            raise CallFailed("invalid", f"tool {tool.name!r}: argument {where}: {error.message}")
        try:
            if inspect.iscoroutinefunction(tool.function):
                result = await asyncio.wait_for(tool.function(**request.args), self.call_timeout)
            else:
                loop = asyncio.get_running_loop()
                job = functools.partial(tool.function, **request.args)
                result = await asyncio.wait_for(loop.run_in_executor(self._executor, job), self.call_timeout)
        except TimeoutError:
            # A thread cannot be killed: the tool may still finish, but its
            # result is discarded and the cell is told it timed out.
            raise CallFailed("timeout", f"tool {tool.name!r} did not finish within {self.call_timeout:g} s") from None
        except Exception as exc:
            raise CallFailed("failed", f"tool {tool.name!r} failed: {type(exc).__name__}: {exc}") from None
        try:
            converted = pydantic_core.to_jsonable_python(result)
            canonical_json(converted)  # NaN, Infinity and the like are not JSON
            return converted
        except Exception as exc:
            raise CallFailed("failed", f"tool {tool.name!r} returned a value that is not JSON: {exc}") from None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
