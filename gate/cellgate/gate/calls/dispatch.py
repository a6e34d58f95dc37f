"""The gate: decides, validates, runs and times every tool call.

``Gate.call`` is the one door between the sandbox and the operator's tools:

1. the tool must exist in this session and the call id must be new;
2. the schema's defaults are filled in, then the arguments are validated
   host-side with jsonschema (the exact object that was validated, and that
   the policy's rules saw, is the one passed to the tool, so an invalid call
   never reaches it and an omitted argument cannot slip past a rule);
3. the policy decides (``policy.evaluate``: budgets, rate limits, rules), and
   an ``approve`` decision waits for the approver (time spent waiting does not
   count against the cell's timeout);
4. the tool runs with a deadline and a per-tool concurrency bound;
5. every failure becomes a typed error reply whose message is redacted (no
   host traceback, path or credential), and every decision is recorded.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import pydantic_core

from cellgate.gate._errors import SourceUnavailable
from cellgate.gate._json import canonical_json, iso, sha256_hex, utcnow
from cellgate.gate.calls.approval import ApprovalAnswer, ApprovalRequest, Approver, DenyApprover, args_digest
from cellgate.gate.calls.policy import Call, Counters, Policy, evaluate
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.redaction import redact
from cellgate.gate.calls.registry import DefaultsFiller, ToolRegistry, with_defaults
from cellgate.gate.calls.scrubber import SecretScrubber
from cellgate.kernel.wire import ErrorKind

PREVIEW_CHARS = 200
ENDED_CELLS_KEPT = 256  # cells whose end a late call's approval is checked against


class Secret(str):
    """A value a tool marks secret: the sandbox gets it, the audit trail only its digest."""

    __slots__ = ()


def split_secrets(value: Any, found: list[str], digest: Callable[[str], Any]) -> tuple[Any, Any]:
    """(plain value for the sandbox, redacted value for the record); secrets go in found."""
    if isinstance(value, Secret):
        found.append(str(value))
        return str(value), digest(str(value))
    if isinstance(value, dict):
        pairs = {k: split_secrets(v, found, digest) for k, v in value.items()}
        return {k: p for k, (p, _) in pairs.items()}, {k: r for k, (_, r) in pairs.items()}
    if isinstance(value, (list, tuple)):
        pairs_list = [split_secrets(v, found, digest) for v in value]
        return [p for p, _ in pairs_list], [r for _, r in pairs_list]
    return value, value


@dataclass
class CallRecord:
    """One gated call as the audit notebook lists it (secrets already redacted)."""

    seq: int
    id: str
    tool: str
    args: dict[str, Any]
    started: str
    decision: str = "deny"
    rule: str | None = None
    ok: bool = False
    result: Any = None
    error: dict[str, str] | None = None
    result_sha256: str | None = None
    result_bytes: int | None = None
    duration_ms: float = 0.0
    approval: dict[str, Any] | None = None
    counters: dict[str, int] | None = None
    # What the kernel says about the call (never checked, only recorded as its claim): the cell
    # line and thread that made it, and the text of that line in the host's copy of the program.
    cell_line: int | None = None
    source_line: str | None = None
    thread: str | None = None
    args_sha256: str = ""
    idempotency_key: str | None = None

    def as_metadata(self, inline_limit: int) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "seq": self.seq, "id": self.id, "tool": self.tool, "args": self.args, "args_sha256": self.args_sha256,
            "decision": self.decision, "rule": self.rule, "ok": self.ok, "started": self.started,
            "duration_ms": round(self.duration_ms, 3),
        }
        for key in ("approval", "counters", "idempotency_key"):
            if getattr(self, key) is not None:
                entry[key] = getattr(self, key)
        claimed = {name: value for name, value in (("line", self.cell_line), ("source_line", self.source_line),
                                                   ("thread", self.thread)) if value is not None}
        if claimed:
            entry["claimed"] = claimed  # reported by the kernel; every view labels it so
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


@dataclass
class CallContext:
    """What the host knows about the cell a call belongs to."""

    cell_source: str = ""
    claimed_line: int | None = None
    claimed_thread: str | None = None
    # Called with True when the call starts waiting for a person, False when it stops.
    waiting: Callable[[bool], None] = lambda _: None
    # Makes the intent record durable just before the tool runs; raises if it cannot.
    intent: Callable[[CallRecord], Awaitable[None]] | None = None
    # Gate-generated, per (session, cell, sequence); passed to tools that take `idempotency_key`.
    idempotency_key: str = ""
    # Who asked: a program in the sandbox ("code") or the model on its own turn ("direct").
    origin: Literal["code", "direct"] = "code"
    # The host's key of the cell run the call is attributed to (unique: a client's msg_ids start over after a
    # restart); ``Gate.withdraw`` with it withdraws the call's approval request when that cell ends.
    cell: str = ""


class Gate:
    """Serves the tool calls of one session."""

    def __init__(
        self,
        registry: ToolRegistry,
        policy: Policy | None = None,
        approver: Approver | None = None,
        session_id: str = "",
        call_timeout: float = 30.0,
        max_workers: int = 16,
    ) -> None:
        self.registry = registry
        self.policy = policy or Policy(default="allow")
        self.approver = approver or DenyApprover()
        self.session_id = session_id
        self.call_timeout = call_timeout
        self.counters = Counters()
        self._seq = itertools.count(1)
        self._seen_ids: set[str] = set()
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="cellgate-tool")
        self._validators = {
            name: jsonschema.Draft202012Validator(tool.parameters)
            for name in registry.names()
            if (tool := registry.get(name)) is not None
        }
        self._fillers = {name: DefaultsFiller(tool.parameters) for name in registry.names()
                         if (tool := registry.get(name)) is not None}
        self._limits: dict[str, asyncio.Semaphore] = {}
        # The secret values this session has seen; the recorder scrubs them from everything it writes.
        self.secrets = SecretScrubber()
        # Approval requests being waited for (request id -> cell, request, waiter), and the ones withdrawn.
        self._asking: dict[str, tuple[str, ApprovalRequest, asyncio.Future[Any]]] = {}
        self._withdrawn: dict[str, str] = {}
        self._ended_cells: collections.OrderedDict[str, str] = collections.OrderedDict()

    def note_secret_args(self, tool: str, args: dict[str, Any]) -> None:
        """Remember the values of ``tool``'s secret arguments (before anything about the call is recorded)."""
        for name in self.policy.secret_args(tool):
            if name in args:
                self.secrets.add(args[name], f"{tool} argument {name}")

    def next_seq(self) -> int:
        return next(self._seq)

    def new_cell(self) -> None:
        self.counters.new_cell()

    def withdraw(self, cell: str, reason: str) -> list[ApprovalRequest]:
        """The cell ended: withdraw every approval request its calls wait for (none of them will run).

        Synchronous, so the caller can journal the withdrawals before the cell's end.
        A call of that cell that reaches approval later is withdrawn at once.
        """
        self._ended_cells[cell] = reason
        while len(self._ended_cells) > ENDED_CELLS_KEPT:
            self._ended_cells.popitem(last=False)
        gone = []
        for request_id, (owner, ask, waiter) in list(self._asking.items()):
            if owner != cell:
                continue
            del self._asking[request_id]
            self._withdrawn[request_id] = reason
            waiter.cancel()
            try:
                self.approver.withdraw(ask, reason)
            except Exception:  # an approver's bookkeeping must not keep the cell from ending
                pass
            gone.append(ask)
        return gone

    async def call(self, request: CallRequest, seq: int, context: CallContext | None = None) -> tuple[dict[str, Any], CallRecord]:
        """Decide and run one call; returns the wire reply and the record of it."""
        context = context or CallContext()
        filler = self._fillers.get(request.tool)
        if filler is not None:  # rules, approver, record and tool all see the arguments the tool will get
            request = dataclasses.replace(request, args=with_defaults(filler, request.args))
        secret_names = self.policy.secret_args(request.tool)
        kept = self.secrets
        self.note_secret_args(request.tool, request.args)
        # Secret arguments as keyed digests, and any secret seen earlier (passed on) as its marker; the
        # argument digest is taken over these, so it reveals nothing a guess could confirm.
        shown_args = kept.scrub({k: (kept.digest(v, f"{request.tool} argument {k}") if k in secret_names else v)
                                 for k, v in request.args.items()})
        record = CallRecord(seq=seq, id=request.id, tool=request.tool, args=shown_args, started=utcnow(),
                            args_sha256=args_digest(shown_args))
        secrets = [str(request.args[k]) for k in secret_names if k in request.args]
        record.thread = kept.scrub_text(redact(context.claimed_thread, secrets)) if context.claimed_thread is not None else None
        if context.claimed_line is not None:
            record.cell_line = context.claimed_line
            lines = context.cell_source.splitlines()
            if 1 <= context.claimed_line <= len(lines):
                record.source_line = kept.scrub_text(lines[context.claimed_line - 1][:500])
        start = time.perf_counter()
        try:
            plain, shown = await self._decide_and_run(request, record, context, secrets)
        except CallFailed as failure:
            record.error = kept.scrub({"kind": failure.kind, "message": redact(failure.message, secrets)})
            reply: dict[str, Any] = {"id": request.id, "ok": False, "error": record.error}
        else:
            record.ok, record.result = True, kept.scrub(shown)
            text = canonical_json(plain)
            # Size and digest of the recorded value (secrets as markers or keyed digests): what the blob
            # holds, and a digest that never confirms a guessed secret.
            recorded = text if record.result is plain else canonical_json(record.result)
            record.result_bytes = len(recorded.encode())
            record.result_sha256 = sha256_hex(recorded)
            reply = {"id": request.id, "ok": True, "result": plain}
        record.duration_ms = (time.perf_counter() - start) * 1000
        record.counters = self.counters.snapshot(request.tool)
        return reply, record

    async def _decide_and_run(self, request: CallRequest, record: CallRecord, context: CallContext,
                              secrets: list[str]) -> tuple[Any, Any]:
        tool = self.registry.get(request.tool)
        if tool is None:
            known = ", ".join(self.registry.names()) or "none"
            raise CallFailed("not_found", f"no tool named {request.tool!r} in this session; the tools are: {known}")
        if request.id in self._seen_ids:
            raise CallFailed("invalid", f"call id {request.id} was already used in this session; each call needs a new id")
        self._seen_ids.add(request.id)
        exposure = self.policy.exposure(tool.name)
        if context.origin == "code" and exposure == "direct":
            raise CallFailed("denied", f"tool {tool.name!r} may only be called by the model on its own turn "
                                       f"([policy.tools.{tool.name}] expose = \"direct\"), not from code; "
                                       "call it as a tool, or ask the operator to expose it to code")
        error = jsonschema.exceptions.best_match(self._validators[tool.name].iter_errors(request.args))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
            raise CallFailed("invalid", f"tool {tool.name!r}: argument {where}: {error.message}")
        call = Call(tool=tool.name, args=request.args, arg_bytes=len(canonical_json(request.args).encode()),
                    source_default=tool.default_decision)
        verdict = evaluate(call, self.policy, self.counters, time.monotonic())
        record.rule = verdict.rule
        if verdict.kind != "ok":
            record.decision = "deny"
            kind: ErrorKind = "denied" if verdict.kind == "denied" else verdict.kind  # type: ignore[assignment]
            if verdict.kind == "denied":
                message = (f"tool {tool.name!r} was denied by policy rule {verdict.rule} (decision: deny); "
                           "ask the operator to allow it")
            else:
                message = f"tool {tool.name!r} refused: {verdict.reason} (rule {verdict.rule})"
            raise CallFailed(kind, message)
        self.counters.record(call, self.policy, time.monotonic())
        if verdict.decision == "approve":
            await self._approve(tool.name, request, record, context, verdict.rule)
        else:
            record.decision = "allow"
        record.idempotency_key = context.idempotency_key or None
        try:
            if context.intent is not None:
                await context.intent(record)
        except OSError as exc:  # the journal: no side effect may run that it cannot record
            raise CallFailed("unavailable", f"tool {tool.name!r} was not run: {exc}") from None
        args = dict(request.args)
        if tool.accepts_idempotency_key:
            args["idempotency_key"] = context.idempotency_key
        limit = self._limits.setdefault(tool.name, asyncio.Semaphore(self._concurrency(tool.name)))
        async with limit:
            result = await self._run(tool, args)
        found: list[str] = []
        plain, shown = split_secrets(result, found, lambda value: self.secrets.digest(value, f"{tool.name} result"))
        secrets.extend(found)
        try:
            converted = pydantic_core.to_jsonable_python(plain)
            size = len(canonical_json(converted).encode())  # NaN, Infinity and the like are not JSON
        except Exception as exc:
            raise CallFailed("failed", f"tool {tool.name!r} returned a value that is not JSON: {exc}") from None
        if size > self.policy.max_result_bytes:
            raise CallFailed("failed", f"tool {tool.name!r} returned {size} bytes, over the "
                                       f"{self.policy.max_result_bytes} byte limit ([policy] max_result_bytes)")
        return converted, pydantic_core.to_jsonable_python(shown) if found else converted

    def _concurrency(self, tool: str) -> int:
        entry = self.policy.for_tool(tool)
        return entry.max_concurrency if entry else 8

    async def _approve(self, tool: str, request: CallRequest, record: CallRecord, context: CallContext,
                       rule: str) -> None:
        now = time.time()
        ask = ApprovalRequest(
            id=f"{self.session_id[:12]}-{record.seq}", session=self.session_id, seq=record.seq, tool=tool,
            args=record.args, args_sha256=record.args_sha256, cell_line=record.cell_line,
            source_line=record.source_line, requested=now, deadline=now + self.policy.approval_timeout,
        )
        answer: ApprovalAnswer | None = None
        if context.cell and context.cell in self._ended_cells:  # the cell ended before the call got here
            self._withdrawn[ask.id] = self._ended_cells[context.cell]
        else:
            waiter = asyncio.ensure_future(self.approver.ask(ask))
            self._asking[ask.id] = (context.cell, ask, waiter)
            context.waiting(True)
            try:
                answer = await asyncio.wait_for(waiter, self.policy.approval_timeout)
            except TimeoutError:
                if ask.id not in self._withdrawn:
                    record.decision = "approval-timeout"
                    record.approval = {"approver": self.approver.name, "answered": None, "requested": iso(now)}
                    raise CallFailed("denied", f"tool {tool!r} needed approval (policy rule {rule}) and no answer "
                                               f"came within {self.policy.approval_timeout:g} s; it was not run") from None
            except asyncio.CancelledError:
                if ask.id not in self._withdrawn:
                    raise  # the gate itself is stopping
            finally:
                self._asking.pop(ask.id, None)
                context.waiting(False)
        withdrawn = self._withdrawn.pop(ask.id, None)
        if withdrawn is not None or answer is None:  # an answer that came with the cell's end counts for nothing
            record.decision = "approval-withdrawn"
            record.approval = {"approver": self.approver.name, "answered": None, "requested": iso(now),
                               "withdrawn": utcnow(), "reason": f"its cell ended ({withdrawn})"}
            raise CallFailed("denied", f"tool {tool!r} was waiting for approval (policy rule {rule}) when its cell "
                                       f"ended ({withdrawn}); the request was withdrawn and the tool was not run")
        record.approval = {"approver": answer.approver, "answered": iso(answer.answered or time.time()),
                           "requested": iso(now), "reason": answer.reason}
        if answer.decision != "allow":
            record.decision = "approval-denied"
            raise CallFailed("denied", f"tool {tool!r} was denied by approver {answer.approver}; the policy required "
                                       f"approval (rule {rule}){': ' + answer.reason if answer.reason else ''}")
        record.decision = "approved"

    async def _run(self, tool: Any, args: dict[str, Any]) -> Any:
        try:
            if inspect.iscoroutinefunction(tool.function):
                return await asyncio.wait_for(tool.function(**args), self.call_timeout)
            loop = asyncio.get_running_loop()
            job = functools.partial(tool.function, **args)
            return await asyncio.wait_for(loop.run_in_executor(self._executor, job), self.call_timeout)
        except TimeoutError:
            # A thread cannot be killed: the tool may still finish, but its
            # result is discarded and the cell is told it timed out.
            raise CallFailed("timeout", f"tool {tool.name!r} did not finish within {self.call_timeout:g} s") from None
        except SourceUnavailable as exc:
            raise CallFailed("unavailable", f"tool {tool.name!r} is unavailable: {exc}") from None
        except Exception as exc:
            raise CallFailed("failed", f"tool {tool.name!r} failed: {type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.approver.close()
