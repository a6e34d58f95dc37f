"""The one call path: every tool call, from the sandbox or the model's own turn, from arrival to typed reply.

``Dispatcher`` is the one door between a session and the operator's tools.
The relay (a call from code in the sandbox) and ``direct`` (the model calls a
tool on its own turn) both take the same two steps:

1. ``admit`` (synchronous, in one place): the audit journal can be written,
   a cell of this session is running and the call is attributed to it (host
   state: a call from work an earlier cell started is refused), and the
   cell's budget of refused calls is not spent;
2. ``serve``: the call gets the session's next sequence number, then
   - the tool must exist and the call id must be new; the schema's defaults
     are filled in and the arguments validated host-side with jsonschema (the
     exact object that was validated, and that the policy's rules saw, is the
     one passed to the tool);
   - the call gets its idempotency key and effect; in a retry, a write an
     earlier attempt committed is answered from the record, and one of
     unknown outcome runs again only under the same key (``calls.retry``);
   - the policy decides (``policy.evaluate``: exposure, budgets, rate limits,
     rules); an ``approve`` decision waits for a person (``asking``: the
     cell's clock is paused meanwhile);
   - the intent record is made durable (no side effect runs that the journal
     cannot record), then the tool runs with a deadline and a per-tool
     concurrency bound;
   - the outcome is recorded (a refusal counted against the cell's budget),
     and the reply is a ``CallReply``: every failure a typed error whose
     message is redacted (no host traceback, path or credential).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import jsonschema
import pydantic_core

from cellgate.gate._errors import SourceUnavailable
from cellgate.gate._json import canonical_json, canonical_text, json_bytes, sha256_hex, utcnow
from cellgate.gate.calls.approval import ApprovalRequest, Approver, DenyApprover, args_digest
from cellgate.gate.calls.asking import ApprovalDesk, CellClock, NoClock, NoNotices, WaitingNotices
from cellgate.gate.calls.lineage import BudgetRefused, Lineage
from cellgate.gate.calls.observer import NO_OBSERVER, CallObserver
from cellgate.gate.calls.plans import Applying, PlannedWrite, Planning
from cellgate.gate.calls.policy import Call, CellCounts, Counters, Policy, evaluate, lineage_budgets
from cellgate.gate.calls.protocol import CallFailed, CallReply, CallRequest, error_reply
from cellgate.gate.calls.record import CallRecord, Secret, conversions, split_secrets
from cellgate.gate.calls.redaction import redact
from cellgate.gate.calls.registry import DefaultsFiller, Tool, ToolRegistry, with_defaults
from cellgate.gate.calls.retry import CellWrites, Recorded
from cellgate.gate.calls.scrubber import SecretScrubber
from cellgate.gate.calls.tool_threads import Running, ToolThreads
from cellgate.kernel.wire import ErrorKind

__all__ = ["CallFailed", "CallLog", "CallRecord", "CallScope", "Dispatcher", "Outcome", "Refused", "Secret"]

RefusalVerdict = Literal["record", "coalesced", "dropped"]
# The decision recorded for a call refused before any policy rule saw it, in the words every view uses
# (``audit.call_summary.decision``: `cellgate show`, report, the notebook's calls table, JupyterLab's panel).
REFUSED_BEFORE_RULES: dict[str, str] = {"invalid": "invalid", "not_found": "not-found"}


class CallLog(Protocol):
    """Where calls are recorded: the session's ``Recorder``; ``cell`` is its record of the call's cell."""

    def unwritable(self) -> str | None:
        """Why the journal cannot be written, or None."""
        ...

    async def call_started(self, cell: Any, record: CallRecord) -> None: ...

    def call_finished(self, cell: Any, record: CallRecord) -> None: ...


class RefusalBudget(Protocol):
    """A cell's budget of refused calls (``session.cells.refusals.RefusalLedger``)."""

    @property
    def budget(self) -> int: ...

    @property
    def exhausted(self) -> bool: ...

    def note(self, tool: str, record: CallRecord | None = None) -> RefusalVerdict: ...

    def outcome(self, record: CallRecord) -> RefusalVerdict: ...


@dataclass(frozen=True)
class CallScope:
    """The cell a call is attributed to: the host's own state, never the kernel's claim."""

    cell: Any  # the recorder's record of the cell, handed back to the CallLog
    msg_id: str
    # Unique per cell run (a client's msg_ids start over after a restart): what approvals are withdrawn by.
    key: str
    source: str  # the host's copy of the cell's program
    # Who asked: a program in the sandbox ("code") or the model on its own turn ("direct").
    origin: Literal["code", "direct"] = "code"
    clock: CellClock = field(default_factory=NoClock)
    notices: WaitingNotices = field(default_factory=NoNotices)  # told while a call waits for a person
    refusals: RefusalBudget | None = None
    counts: CellCounts | None = None  # the cell's own per-cell budget counts (None: the dispatcher's current cell)
    # The cell's idempotency keys and, for a retry, what its earlier attempts did (``calls.retry``); None: a
    # chain of its own (a direct call).
    writes: CellWrites | None = None


@dataclass(frozen=True)
class Refused:
    """Admission said no: the reply, and the ``call-rejected`` event's fields when it is journalled one by one."""

    reply: CallReply
    event: dict[str, Any] | None = None
    refusal: RefusalVerdict | None = None  # how the cell's refusal budget counted it


@dataclass(frozen=True)
class Outcome:
    """A served call: its reply, its record, and how the cell's refusal budget counted it."""

    reply: CallReply
    record: CallRecord
    refusal: RefusalVerdict


class Dispatcher:
    """Serves the tool calls of one session."""

    answers_from_record: ClassVar[bool] = False  # a replay's gate: no call reaches the world (``ops.replay``)

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        log: CallLog,
        policy: Policy | None = None,
        approver: Approver | None = None,
        session_id: str = "",
        call_timeout: float = 30.0,
        max_workers: int = 16,
        first_seq: int = 1,  # a session continued by a new host process numbers on (``audit.resume``)
    ) -> None:
        self.registry = registry
        self.log = log
        self.policy = policy or Policy.model_validate({"default": "allow"})
        self.approvals = ApprovalDesk(approver or DenyApprover(), session_id, self.policy.approval_timeout)
        self.session_id = session_id
        self.call_timeout = call_timeout
        self.counters = Counters()
        # The budgets this session draws on with its forks, trials, pool members and resumes (``calls.lineage``);
        # a fork's or a resumed session's gate is handed its parent's.
        self.lineage = Lineage.new()
        self.principal: str | None = None  # whom the session acts for (Session.claim), for rules naming principals
        self._seq = itertools.count(first_seq)
        self._seen_ids: set[str] = set()
        self._threads = ToolThreads(max_workers)
        tools = [tool for name in registry.names() if (tool := registry.get(name)) is not None]
        self._validators = {tool.name: jsonschema.Draft202012Validator(tool.parameters) for tool in tools}
        self._fillers = {tool.name: DefaultsFiller(tool.parameters) for tool in tools}
        self._limits: dict[str, asyncio.Semaphore] = {}
        # The secret values this session has seen; the recorder scrubs them from everything it writes.
        self.secrets = SecretScrubber()
        self.telemetry: CallObserver = NO_OBSERVER  # the session's observer (``cellgate.gate.telemetry``)
        # A plan's gates (``calls.plans``): one that lists writes instead of making them (a plan's fork), and one
        # whose planned writes count as approved by the plan's approver (``Session.apply``).
        self.planning: Planning | None = None
        self.applying: Applying | None = None

    def tool_added(self, tool: Tool) -> None:
        """``tool`` joins a running session (``Session.add_tools``): called before the registry has it."""
        self._validators[tool.name] = jsonschema.Draft202012Validator(tool.parameters)
        self._fillers[tool.name] = DefaultsFiller(tool.parameters)

    def note_secret_args(self, tool: str, args: dict[str, Any]) -> None:
        """Remember the values of ``tool``'s secret arguments (before anything about the call is recorded)."""
        for name in self.policy.secret_args(tool):
            if name in args:
                self.secrets.add(args[name], f"{tool} argument {name}")

    def new_cell(self) -> None:
        """A cell starts: per-cell budgets start over."""
        self.counters.new_cell()

    def withdraw(self, cell: str, reason: str) -> list[ApprovalRequest]:
        """The cell (by ``CallScope.key``) ended: withdraw the approval requests its calls wait for."""
        return self.approvals.withdraw(cell, reason)

    # ------------------------------------------------------------ the path
    def admit(self, request: CallRequest, scope: CallScope | None) -> Refused | None:
        """Whether the call may be served at all (None: serve it); ``scope`` is the running cell, if any."""
        broken = self.log.unwritable()
        if broken is not None:
            return Refused(error_reply(request.id, "unavailable", f"the audit journal cannot be written ({broken}); "
                                       "the gate refuses calls until the operator fixes it"))
        if scope is None:
            return Refused(error_reply(request.id, "no_cell", f"tool {request.tool!r} was called while no cell of "
                                       "this session is running; tools can only be called from a running cell"),
                           event={"reason": "no cell is running", "tool": request.tool, "id": request.id})
        if request.cell is not None and request.cell != scope.msg_id:
            return Refused(error_reply(request.id, "no_cell", f"tool {request.tool!r} was called by work an earlier "
                                       "cell started (a thread that outlived its cell); work that outlives its cell "
                                       "cannot act through the gate"),
                           event={"reason": "late: from work an earlier cell started", "tool": request.tool,
                                  "id": request.id, "cell": request.cell[:128]})
        if scope.refusals is not None and scope.refusals.exhausted:  # answered and counted, not recorded
            return Refused(error_reply(request.id, "budget", f"this cell's {scope.refusals.budget} refused calls "
                                       "([sandbox] max_refusals_per_cell) are spent; the cell is stopped"),
                           refusal=scope.refusals.note(request.tool))
        return None

    async def serve(self, request: CallRequest, scope: CallScope,
                    answer: Callable[[CallReply], None] | None = None, tool: Tool | None = None) -> Outcome:
        """Decide, run and record an admitted call. ``answer``, if given, is handed the reply before the call's
        record is made (nothing else runs between the two): a large result travels to the kernel, and is decoded
        there, while the gate takes its canonical text and digest. ``tool``: the gate's own tool for this one call
        (a request of the network, ``network.exchange``), never in the registry, so code cannot call it."""
        seq = next(self._seq)
        reply, record = await self._call(request, seq, scope, tool)
        if answer is not None:
            answer(reply)
        if reply.ok:
            _digest_result(record, reply)
        refusal = scope.refusals.outcome(record) if scope.refusals is not None else "record"
        if refusal == "record":
            self.log.call_finished(scope.cell, record)
        return Outcome(reply, record, refusal)

    async def _call(self, request: CallRequest, seq: int, scope: CallScope,
                    given: Tool | None = None) -> tuple[CallReply, CallRecord]:
        """Decide and run one call (its intent recorded before the tool runs); the reply and the record of it."""
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
        span = self.telemetry.call_started(scope.cell, request.tool, request.id, scope.origin)
        record.trace = span.ids()
        secrets = [str(request.args[k]) for k in secret_names if k in request.args]
        record.thread = kept.scrub_text(redact(request.thread, secrets)) if request.thread is not None else None
        if request.line is not None:
            record.cell_line = request.line
            lines = scope.source.splitlines()
            if 1 <= request.line <= len(lines):
                record.source_line = kept.scrub_text(lines[request.line - 1][:500])
        start = time.perf_counter()
        try:
            # In the call's trace context, when traced: the tool's own instrumented clients continue the trace.
            plain, shown, encoded = await span.inside(self._decide_and_run)(request, record, scope, secrets, given)
        except CallFailed as failure:
            if record.rule is None and failure.kind in REFUSED_BEFORE_RULES:  # no rule decided: not a "deny"
                record.decision = REFUSED_BEFORE_RULES[failure.kind]
            record.error = kept.scrub({"kind": failure.kind, "message": redact(failure.message, secrets)})
            reply = CallReply(id=request.id, ok=False, error=record.error)
        except BaseException:  # cancelled: the observer still ends the call's span
            span.ended(record)
            raise
        else:
            record.ok, record.result = True, kept.scrub(shown)  # its size and digest: serve, once answered
            reply = CallReply(id=request.id, ok=True, result=plain, encoded=encoded, planned=record.planned)
        record.duration_ms = (time.perf_counter() - start) * 1000
        record.counters = self.counters.snapshot(request.tool, scope.counts)
        span.ended(record)
        return reply, record

    async def _decide_and_run(self, request: CallRequest, record: CallRecord, scope: CallScope,
                              secrets: list[str], given: Tool | None = None) -> tuple[Any, Any, bytes]:
        """Decide and run the call: the result for the sandbox, the one for the record, and the first's JSON (``json_bytes``)."""
        tool = given if given is not None else self.registry.get(request.tool)
        if tool is None:
            known = ", ".join(self.registry.names()) or "none"
            raise CallFailed("not_found", f"no tool named {request.tool!r} in this session; the tools are: {known}")
        if request.id in self._seen_ids:
            raise CallFailed("invalid", f"call id {request.id} was already used in this session; each call needs a new id")
        self._seen_ids.add(request.id)
        if scope.origin == "code" and self.policy.exposure(tool.name) == "direct":
            raise CallFailed("denied", f"tool {tool.name!r} may only be called by the model on its own turn "
                                       f"([policy.tools.{tool.name}] expose = \"direct\"), not from code; "
                                       "call it as a tool, or ask the operator to expose it to code")
        error = jsonschema.exceptions.best_match(self._validators[tool.name].iter_errors(request.args))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
            raise CallFailed("invalid", f"tool {tool.name!r}: argument {where}: {error.message}")
        record.effect, _ = tool.effective_effect(self.policy.effect(tool.name))
        writes = scope.writes or CellWrites(chain=scope.msg_id)
        record.idempotency_key = writes.key(self.lineage.id, tool.name, record.args_sha256)
        recorded = writes.recorded(record.idempotency_key) if record.effect != "read" else None
        if recorded is not None and recorded.known == "committed":
            return await self._answer_from_record(tool, record, recorded, scope, writes)
        if recorded is not None and record.effect == "write" and not tool.accepts_idempotency_key:
            seq = recorded.call.get("seq")
            raise CallFailed("outcome_unknown", f"tool {tool.name!r} was not run again: an earlier attempt of this "
                             f"cell made the same call (#{seq}) and its outcome is unknown (it ran and "
                             f"{_why_unknown(recorded)}); the tool takes no idempotency key, so running it again "
                             "could do it twice. Look first (a read), then write if it is missing")
        call = Call(tool=tool.name, args=request.args, arg_bytes=len(canonical_json(request.args).encode()),
                    source_default=tool.default_decision, principal=self.principal, source_rule=tool.decided_by)
        verdict = evaluate(call, self.policy, self.counters, time.monotonic(), scope.counts)
        record.rule = verdict.rule
        if self.planning is not None and record.effect != "read":
            return await self._planned(tool, request.args, record, verdict)
        if verdict.kind != "ok":
            record.decision = "deny"
            kind: ErrorKind = "denied" if verdict.kind == "denied" else verdict.kind
            if verdict.kind == "denied":
                message = (f"tool {tool.name!r} was denied by policy rule {verdict.rule} (decision: deny); "
                           "ask the operator to allow it")
            else:
                message = f"tool {tool.name!r} refused: {verdict.reason} (rule {verdict.rule})"
            raise CallFailed(kind, message)
        try:  # the session budgets, counted in the lineage's ledger: every fork, trial and resume shares them
            taken = self.lineage.take_all(lineage_budgets(call, self.policy))
        except BudgetRefused as exc:
            record.rule, record.decision = exc.what, "deny"
            raise CallFailed("budget", f"tool {tool.name!r} refused: {exc}") from None
        except (OSError, ValueError) as exc:
            raise CallFailed("unavailable", f"tool {tool.name!r} was not run: the lineage's budget ledger cannot be "
                                            f"used ({exc})") from None
        self.counters.record(call, self.policy, time.monotonic(), scope.counts)
        self.counters.session, self.counters.per_tool[call.tool] = taken["session"], taken[f"tool:{call.tool}"]
        planned = self.applying.match(tool.name, record.args_sha256) if self.applying is not None else None
        if verdict.decision == "approve" and planned is not None and self.applying is not None:
            plan = self.applying.plan  # approved once, as a set: this call is its write number `planned`
            record.decision = "approved"
            record.approval = {"approver": plan.approver, "plan": plan.id, "planned_write": planned,
                               "reason": plan.reason}
        elif verdict.decision == "approve":
            self.telemetry.approvals_waiting(tool.name, 1)
            try:
                await self.approvals.ask(tool.name, record, str(verdict.rule), scope.key, scope.clock, scope.notices,
                                         self.principal)
            finally:
                self.telemetry.approvals_waiting(tool.name, -1)
        else:
            record.decision = "allow"
        idempotency_key = record.idempotency_key
        try:
            await self.log.call_started(scope.cell, record)
        except OSError as exc:  # the journal: no side effect may run that it cannot record
            raise CallFailed("unavailable", f"tool {tool.name!r} was not run: {exc}") from None
        args = dict(request.args)
        if tool.accepts_idempotency_key:
            args["idempotency_key"] = idempotency_key
        limit = self._limits.setdefault(tool.name, asyncio.Semaphore(self._concurrency(tool.name)))
        await self._wait_for_slot(tool, limit.acquire(), f"all {self._concurrency(tool.name)} of its slots "
                                  f"([policy.tools.{tool.name}] max_concurrency)")
        try:
            record.ran = True
            result = await self._run(tool, args, Running(record.seq, record.id, tool.name, record.started))
        finally:
            limit.release()
        return self._result(tool, record, result, secrets)

    def _result(self, tool: Tool, record: CallRecord, result: Any,
                secrets: list[str]) -> tuple[Any, Any, bytes]:
        """A tool's result as the sandbox gets it, as the record keeps it, and the first's JSON."""
        found: list[str] = []
        # Scrubbing costs nothing while no Secret exists in this process; else one walk finds them.
        plain, shown = split_secrets(result, found, lambda value: self.secrets.digest(value, f"{tool.name} result"))
        secrets.extend(found)
        record.result_redacted = bool(found)
        try:
            try:  # a result of JSON's own types (most are) is encoded as it is: one encode, no conversion
                converted, encoded = plain, json_bytes(plain)
            except (TypeError, ValueError):  # anything else converted first (NaN and the like then refused)
                converted = pydantic_core.to_jsonable_python(plain)
                encoded = canonical_json(converted).encode()
                record.converted = conversions(plain, converted) or None  # the record says what the cell got
        except Exception as exc:
            raise CallFailed("failed", f"tool {tool.name!r} returned a value that is not JSON: {exc}") from None
        size = len(encoded)  # (within a few bytes of the canonical size: exponents are spelled apart)
        if size > self.policy.max_result_bytes:
            raise CallFailed("failed", f"tool {tool.name!r} returned {size} bytes, over the "
                                       f"{self.policy.max_result_bytes} byte limit ([policy] max_result_bytes)")
        return converted, pydantic_core.to_jsonable_python(shown) if found else converted, encoded

    async def _planned(self, tool: Tool, args: dict[str, Any], record: CallRecord,
                       verdict: Any) -> tuple[Any, Any, bytes]:
        """A planning gate's write: listed with the policy's decision, not made; answered by the tool's preview,
        or by a placeholder the kernel makes that fails when the code uses it."""
        assert self.planning is not None
        decision = verdict.decision if verdict.kind == "ok" else "deny"
        number = self.planning.add(PlannedWrite(tool.name, dict(record.args), record.args_sha256, decision,
                                                verdict.rule))
        record.decision, record.rule = "planned", f"plan: write {number} ({decision})"
        if tool.preview is None:
            record.planned = True
            return None, None, b"null"
        try:
            preview = await asyncio.wait_for(asyncio.to_thread(tool.preview, **args), self.call_timeout)
        except Exception as exc:
            raise CallFailed("failed", f"tool {tool.name!r}: its preview failed: {type(exc).__name__}: {exc}") from None
        return self._result(tool, record, preview, [])

    async def _answer_from_record(self, tool: Tool, record: CallRecord, recorded: Recorded, scope: CallScope,
                                  writes: CellWrites) -> tuple[Any, Any, bytes]:
        """A retry's write that an earlier attempt committed: its recorded result, the tool not run (no decision:
        the earlier call was decided, and nothing reaches the world now)."""
        call = recorded.call
        record.answered_from = {"seq": call.get("seq"), "cell": recorded.cell}
        record.decision, record.rule = "allow", "retry: answered from the record"
        if call.get("result_redacted") is True:
            raise CallFailed("outcome_unknown", f"tool {tool.name!r} was not run again: an earlier attempt made this "
                             f"call (#{call.get('seq')}) and it succeeded, but its result held a secret, which the "
                             "record keeps only as a digest; look the result up (a read)")
        try:
            value = writes.load(call)
        except Exception as exc:  # a blob missing or damaged: never run the write again instead
            raise CallFailed("outcome_unknown", f"tool {tool.name!r} was not run again: an earlier attempt made this "
                             f"call (#{call.get('seq')}) and it succeeded, but its recorded result cannot be read "
                             f"({type(exc).__name__}: {exc}); look the result up (a read)") from None
        try:
            await self.log.call_started(scope.cell, record)
        except OSError as exc:
            raise CallFailed("unavailable", f"tool {tool.name!r}: the answer was not given: {exc}") from None
        return self._result(tool, record, value, [])

    def _concurrency(self, tool: str) -> int:
        entry = self.policy.for_tool(tool)
        return entry.max_concurrency if entry else 8

    async def _wait_for_slot(self, tool: Tool, taken: Awaitable[Any], which: str) -> None:
        """Backpressure, not a timeout: a call waits for a free slot up to the queue bound, then fails as busy, not
        run; its own deadline starts only when it runs."""
        entry = self.policy.for_tool(tool.name)
        bound = entry.max_queue_wait if entry and entry.max_queue_wait else self.policy.max_queue_wait
        try:
            async with asyncio.timeout(bound):
                await taken
        except TimeoutError:
            raise CallFailed("busy", f"tool {tool.name!r} was not run: {which} stayed taken for {bound:g} s "
                                     "([policy] max_queue_wait); the gate is busy, try again later") from None

    async def _run(self, tool: Tool, args: dict[str, Any], call: Running) -> Any:
        blocking = not inspect.iscoroutinefunction(tool.function)
        if blocking:
            await self._wait_for_slot(tool, self._threads.reserve(), "the session's tool threads")
        try:
            if blocking:
                return await self._threads.run(functools.partial(tool.function, **args), call, self.call_timeout)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation (gh-86296).
            async with asyncio.timeout(self.call_timeout):
                return await tool.function(**args)
        except TimeoutError:
            # A thread cannot be killed: the tool may still finish, but its result is discarded and the
            # cell is told it timed out; a thread still running when the session ends is abandoned (close).
            raise CallFailed("timeout", f"tool {tool.name!r} did not finish within {self.call_timeout:g} s") from None
        except SourceUnavailable as exc:
            raise CallFailed("unavailable", f"tool {tool.name!r} is unavailable: {exc}") from None
        except Exception as exc:
            raise CallFailed("failed", f"tool {tool.name!r} failed: {type(exc).__name__}: {exc}") from None

    def close(self) -> list[Running]:
        """The session ends; the calls whose tools still run on their threads, left behind (for the journal)."""
        self.approvals.close()
        return self._threads.abandon()


def _why_unknown(recorded: Recorded) -> str:
    error = recorded.call.get("error")
    kind = error.get("kind") if isinstance(error, dict) else None
    return {"timeout": "its deadline passed", "unavailable": "its source stopped answering"}.get(
        str(kind), "the host stopped before its outcome was recorded")


def _digest_result(record: CallRecord, reply: CallReply) -> None:
    """Size and digest of the recorded value (secrets as markers or keyed digests): what the blob holds, and a
    digest that never confirms a guessed secret. The canonical text is the reply's JSON where spelled alike."""
    assert reply.encoded is not None
    text = canonical_text(reply.result, reply.encoded)
    recorded = text if record.result is reply.result else canonical_json(record.result)
    recorded_bytes = recorded.encode()
    record.result_text = recorded
    record.result_bytes = len(recorded_bytes)
    record.result_sha256 = sha256_hex(recorded_bytes)
