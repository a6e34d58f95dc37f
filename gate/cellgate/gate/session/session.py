"""``Session``: the library API for running cells in a sandboxed, gated, recorded kernel.

A thin layer over ``jupyter_client``: it launches the ``cellgate`` kernelspec
(so it uses exactly the provisioner, gate and recorder every other Jupyter
frontend gets), sends cells, and returns each cell's record::

    async with Session(tools=["tools.py"], notebook="run.ipynb") as session:
        result = await session.execute("print(tools.list_orders('2026-10')[:1])")
        print(result.status, result.text)
"""

from __future__ import annotations

import asyncio
import queue
import re
import shlex
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from jupyter_client.manager import AsyncKernelManager
from typing_extensions import Unpack

from cellgate.gate._errors import ConfigError, KernelDied, SessionError
from cellgate.gate.audit.journal import Journal
from cellgate.gate.audit.recorder import CellRecord, Recorder
from cellgate.gate.audit.reducer import LIVE_EVENTS
from cellgate.gate.calls import program
from cellgate.gate.calls.approval import ApprovalRequest, args_digest
from cellgate.gate.calls.direct import DirectResult
from cellgate.gate.calls.dispatch import CallRecord, Dispatcher
from cellgate.gate.calls.plans import Applying, Plan, Planning
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.program import ToolSpec
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.calls.retry import last_failed as retry_of_last_failed
from cellgate.gate.calls.sources import ToolSource
from cellgate.gate.calls.writes import Writes
from cellgate.gate.config import Settings
from cellgate.gate.sandbox.images.spec import REQUIREMENT
from cellgate.gate.sandbox.kernelspec import KERNEL_NAME, CellgateSpecManager
from cellgate.gate.session import commands, files, live, streaming, tool_additions
from cellgate.gate.session.commands import CommandResult
from cellgate.gate.session.files import FileRecord
from cellgate.gate.session.launch import (
    ApproverSpec,
    GateFactory,
    JournalFactory,
    LaunchOptions,
    RecorderFactory,
    SandboxOverrides,
)
from cellgate.gate.session.provisioner import GVisorProvisioner
from cellgate.gate.session.ready import wait_for_kernel_info
from cellgate.gate.telemetry import is_traceparent

# Evaluated by the kernel after each cell (a Jupyter user_expression), so that after a
# restart the notebook can say which variables were lost. Kernel output: never trusted
# beyond being a list of identifiers.
NAMES = "cellgate_names"
NAMES_EXPRESSION = ("' '.join(sorted(n for n in globals() if n.isidentifier() and not n.startswith('_') "
                    "and n not in get_ipython().user_ns_hidden))")
NOT_STARTED = "the session is not started; call start() or use `async with`"
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,99}$")


def checked_traceparent(value: str) -> str:
    if not is_traceparent(value):
        raise SessionError(f"traceparent {value[:100]!r} is not a W3C traceparent (00-<32 hex trace id>-<16 hex "
                           "parent id>-<2 hex flags>); pass the caller's header value unchanged, or None")
    return value


def variable_names(reply_content: dict[str, Any]) -> list[str] | None:
    """The names a reply's user_expression listed (at most 200 identifiers), or None."""
    found = (reply_content.get("user_expressions") or {}).get(NAMES) if isinstance(reply_content, dict) else None
    if not isinstance(found, dict) or found.get("status") != "ok":
        return None
    text = (found.get("data") or {}).get("text/plain")
    if not isinstance(text, str) or len(text) > 20_000 or len(text) < 2 or text[0] not in "'\"":
        return None
    return [name for name in text[1:-1].split() if _IDENTIFIER.match(name)][:200]


@dataclass(frozen=True)
class CellResult:
    """What one cell did: status, outputs (nbformat dicts) and its gated calls."""

    status: str
    outputs: list[dict[str, Any]]
    calls: list[CallRecord]
    execution_count: int | None
    limits_hit: list[str]
    error: dict[str, str] | None
    # Its writes by outcome (committed, answered from the record, failed, unknown) and its count of reads
    # (``calls.writes``): after a failure, what is already done in the world.
    writes: Writes = field(default_factory=Writes)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def stdout(self) -> str:
        return "".join(o["text"] for o in self.outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")

    @property
    def text(self) -> str:
        """Plain text of everything the cell showed, in order."""
        parts = []
        for output in self.outputs:
            kind = output.get("output_type")
            if kind == "stream":
                parts.append(output["text"])
            elif kind in ("execute_result", "display_data"):
                plain = output.get("data", {}).get("text/plain")
                if plain:
                    parts.append(plain + "\n")
            elif kind == "error":
                parts.append(f"{output.get('ename')}: {output.get('evalue')}\n")
        return "".join(parts)

    @classmethod
    def from_record(cls, record: CellRecord) -> CellResult:
        return cls(
            status=str(record.status), outputs=[dict(o) for o in record.outputs],
            calls=sorted(record.call_records, key=lambda c: c.seq), execution_count=record.execution_count,
            limits_hit=list(record.limits_hit), error=record.error,
            writes=Writes.of([*record.calls, *(dict(c, outcome="unknown") for c in record.pending_calls.values())]),
        )


class Trial:
    """A cell run in a fork of a session (``Session.trial``), waiting to be kept or discarded.

    ``mark``: how many cells the session's record held when the trial began; a cell the session records after it
    (code, command, direct call, file, restart) is not in the fork's kernel, and the trial is then not kept."""

    def __init__(self, session: Session, fork: Session, result: CellResult, mark: int = 0) -> None:
        self.session = session
        self.fork = fork
        self.result = result
        self.mark = mark
        self.decided: Literal["kept", "discarded"] | None = None

    def _decide(self, decision: Literal["kept", "discarded"]) -> None:
        if self.decided is not None:
            raise SessionError(f"this trial was {self.decided} already")
        self.decided = decision
        # A discarded trial's kernel state goes; its writes do not (``calls.writes``): the record says which stay.
        stays = {"writes_stay": [w.line() for w in self.result.writes.done],
                 "writes_unknown": [w.line() for w in self.result.writes.unknown]} if decision == "discarded" else {}
        self.session.recorder.event(f"trial-{decision}", sync=True, notebook=self.fork.notebook_path.name,
                                    status=self.result.status, **{k: v for k, v in stays.items() if v})

    def _ran_since(self) -> int:
        """The cells the session recorded after the trial began (its notes of forks and trials aside)."""
        return self.session._cells_since(self.mark)

    async def keep(self) -> Session:
        """The fork becomes the session (the same object, driving the fork's kernel and notebook from now on; the
        fork's own object is left empty); the session's own kernel and record end, the record naming the notebook it
        goes on in (``continued_in``) and that notebook naming this one (``continued_from``). Refused, with both
        usable, when the session ran cells after the trial began: they are not in the fork's kernel."""
        if self.decided is None and (ran := self._ran_since()):
            raise SessionError(
                f"this session ran {ran} cell{'s' if ran != 1 else ''} after the trial began; "
                f"{'they are' if ran != 1 else 'it is'} not in the trial's kernel, so the trial is not kept: "
                "discard it (await trial.discard()) and try again from the session as it is now")
        self._decide("kept")
        session, fork = self.session, self.fork
        before, after = session.notebook_path.name, fork.notebook_path.name
        session.provisioner.ending = ("session-ended", {"continued_in": after})
        fork.recorder.event("session-continued", sync=True, continued_from=before, status=self.result.status)
        fork.recorder.write_notebook()
        former = session._take_over(fork)
        await former.shutdown()  # the session's former kernel and record
        return session

    async def discard(self) -> Writes:
        """The fork ends; the session's kernel is as it was before the trial. The world is not: the trial's writes
        that were made (or may have been) stay; they are returned (``Writes``) and named in the record. To try
        writes without making them, plan them (``Session.plan``)."""
        self._decide("discarded")
        await self.fork.shutdown()
        return self.result.writes


class Session:
    """One sandboxed kernel with its tools, gate and audit notebook.

    ``tools`` are paths of tool modules, modules, plain functions or ``Tool`` objects: the program starting the
    session chose them, so each is allowed unless ``[policy.tools.<name>]`` or the tool's own
    ``Tool(decision="deny" | "ask")`` says otherwise (``calls.program``; docs: "Tools from your program").
    ``config``, ``settings`` and the ``[sandbox]`` overrides
    (``isolation``, ``memory_mb``, ...) say what it runs with; ``registry``,
    ``sources``, ``approver``, ``gate_factory``, ``recorder_factory`` and
    ``journal_factory`` replace the parts it is made of (tests, replay,
    benchmarks; see ``LaunchOptions``). ``traceparent`` (W3C Trace Context) is the caller's trace, which
    the session's spans continue when an observer traces it (README, "Tracing"); it is recorded in the
    session's metadata.
    """

    def __init__(
        self,
        *,
        config: str | Path | None = None,
        tools: Sequence[ToolSpec] = (),
        notebook: str | Path | None = None,
        isolation: Literal["gvisor", "none"] | None = None,
        cwd: str | Path | None = None,
        approver: ApproverSpec | None = None,
        registry: ToolRegistry | None = None,
        gate_factory: GateFactory = Dispatcher,
        metadata: Mapping[str, Any] | None = None,
        settings: Settings | None = None,
        sources: Sequence[ToolSource] = (),
        recorder_factory: RecorderFactory = Recorder,
        journal_factory: JournalFactory = Journal,
        traceparent: str | None = None,
        package_layer: bool = False,
        **sandbox: Unpack[SandboxOverrides],
    ) -> None:
        if traceparent is not None:
            metadata = {**(metadata or {}), "traceparent": checked_traceparent(traceparent)}
        paths, own = program.split(tools, "Session(tools=...)")
        if own:  # the program's functions and Tools: a source opened with the others (calls.program: their policy)
            sources = (*sources, program.ProgramTools(own))
        self._options = LaunchOptions(
            settings=settings, config=str(config) if config else None, tools=tuple(paths),
            notebook=Path(notebook) if notebook else None,
            sandbox=MappingProxyType({"isolation": isolation, **sandbox}),
            metadata=MappingProxyType(dict(metadata or {})),
            registry=registry, sources=tuple(sources), approver=approver, gate_factory=gate_factory,
            recorder_factory=recorder_factory, journal_factory=journal_factory, package_layer=package_layer,
        )
        self._cwd = str(cwd) if cwd else None
        self.km: AsyncKernelManager | None = None
        self._names: list[str] | None = None  # the user's variables after the last cell, if the kernel said
        self._client: Any = None
        self.dead = False

    @property
    def launch_options(self) -> LaunchOptions:
        """What this session hands its provisioner (frozen)."""
        return self._options

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> Session:
        if self.km is not None:
            raise SessionError("this session is already started; use a new Session for another sandbox")
        self.km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=CellgateSpecManager())
        kwargs: dict[str, Any] = {"cellgate": self._options}
        if self._cwd:
            kwargs["cwd"] = self._cwd
        try:
            await self.km.start_kernel(**kwargs)
        except BaseException:
            await self._cleanup_failed_start()
            raise
        try:
            await self._connect()
        except BaseException:  # the kernel died before answering: leave nothing behind
            if self._client is not None:
                self._client.stop_channels()
                self._client = None
            await self.km.shutdown_kernel(now=True)
            self.km = None
            raise
        return self

    async def _cleanup_failed_start(self) -> None:
        provisioner = self.km.provisioner if self.km else None
        if isinstance(provisioner, GVisorProvisioner):
            await provisioner.cleanup(restart=False)

    def _manager(self) -> AsyncKernelManager:
        if self.km is None:
            raise SessionError(NOT_STARTED)
        return self.km

    async def _connect(self) -> None:
        self._client = self._manager().client()
        self._client.start_channels(iopub=False, stdin=False, hb=False, control=False)
        await wait_for_kernel_info(self._client, timeout=60, heard=self.provisioner.iopub_heard)
        self.dead = False

    async def restart(self) -> None:
        """Start a fresh sandboxed kernel in the same session (variables are gone)."""
        km = self._manager()
        if self._client is not None:
            self._client.stop_channels()
        await km.restart_kernel(now=True)
        await self._connect()

    @property
    def connection_file(self) -> str:
        """The frontend connection file: `jupyter console --existing` it to attach."""
        return str(self._manager().connection_file)

    async def shutdown(self) -> None:
        if self.km is None:
            return
        if self._client is not None:
            self._client.stop_channels()
            self._client = None
        if await self.km.is_alive():
            await self.km.shutdown_kernel(now=False)
        else:
            await self.km.shutdown_kernel(now=True)
        self.km = None

    # -------------------------------------------------------------- live: pause, resume, fork (``session.live``)
    @property
    def can_checkpoint(self) -> bool:
        """Whether ``checkpoint``, ``fork`` and ``trial`` work here: a kernel runs, on a backend that can save one
        (local gVisor, as root: runsc cannot restore --rootless)."""
        handle = self.provisioner.handle
        return handle is not None and handle.backend.checkpointable(handle)

    async def checkpoint(self, path: str | Path | None = None) -> Path:
        """Pause: save the kernel as it is (variables, imports, its /tmp) into the new folder ``path`` (default:
        beside the notebook) and stop its sandbox; the record ends ``session-paused``. Refused while a cell runs.
        ``Session.resume(path, ...)`` continues it, in this process or another."""
        return (await live.pause(self, path)).path

    @classmethod
    def resume(cls, path: str | Path, **options: Any) -> Session:
        """A session that continues the paused session of checkpoint ``path`` when started: the same notebook and
        gate state, its kernel restored in a new sandbox. ``options`` are ``Session``'s (the same tools, config and
        settings it was made with; a change is refused); the checkpoint is verified before anything reads it."""
        session = cls(**options)
        session._options = live.resume_options(path, session._options)
        return session

    async def fork(self, count: int, path: str | Path | None = None, *, budget: int | None = None) -> list[Session]:
        """``count`` started sessions, each continuing this kernel as it is now in a sandbox of its own, with its
        own gate (drawing on this session's budgets, ``calls.lineage``; no approvals carried over) and notebook
        naming this one; this session goes on. ``budget``: each fork's share of the calls this session has left
        (never more: ValueError). ``path``: the new folder of the checkpoint they start from, kept (default:
        beside the notebook, deleted once the forks are restored or failed)."""
        parent, limit = self.provisioner.gate.lineage, self.policy.max_calls_per_session
        shares = [parent.share(budget, limit) for _ in range(count)]  # refused before anything is saved
        checkpoint = await live.fork(self, count, path)
        try:
            forks = [self._forked(live.fork_options(checkpoint, self._options, number, count, share,
                                                    {"lineage": share.id, "share": budget, "left": share.left(limit)}))
                     for number, share in enumerate(shares, 1)]
            started = await asyncio.gather(*(f.start() for f in forks), return_exceptions=True)
        finally:  # no session starts from it again: its plaintext goes (a folder ``path`` named stays, sealed)
            live.discard(checkpoint)
        failures = [r for r in started if isinstance(r, BaseException)]
        if failures:
            await asyncio.gather(*(f.shutdown() for f in forks), return_exceptions=True)
            raise failures[0]
        return forks

    def _forked(self, options: LaunchOptions) -> Session:
        forked = Session()
        forked._options, forked._cwd = options, self._cwd
        return forked

    async def trial(self, code: str, timeout: float | None = None) -> Trial:
        """Run ``code`` as a cell in a fork of this session, not here: ``Trial.result`` says what it did; then
        ``await trial.keep()`` makes the fork this session (its notebook goes on; this one ends saying so) or
        ``await trial.discard()`` drops it (this session is as it was). Both records say which was kept."""
        mark = len(self.recorder.cells)  # what the session records from here on is not in the fork's kernel
        [fork] = await self.fork(1)
        try:
            result = await fork.execute(code, timeout)
        except BaseException:
            await fork.shutdown()
            raise
        return Trial(self, fork, result, mark)

    async def plan(self, code: str, timeout: float | None = None) -> Plan:
        """Run ``code`` in a fork of this session whose gate makes no write (``calls.plans``): reads run, each write
        is listed with the policy's decision and answered by the tool's preview or a placeholder. Returns the
        ``Plan``: approve or deny it once (``plan.approve()``), then ``await session.apply(plan)``."""
        mark = len(self.recorder.cells)
        [fork] = await self.fork(1)
        planning = fork.provisioner.gate.planning = Planning()
        where = fork.notebook_path.name
        try:
            result = await fork.execute(code, timeout)
        finally:
            await fork.shutdown()
        plan = Plan(code=code, writes=planning.writes, output=result.text, status=result.status, mark=mark,
                    ttl=self.policy.plan_ttl, owner=str(self.notebook_path))
        self.recorder.event("plan-made", sync=True, plan=plan.id, notebook=where,
                            status=result.status, counts=plan.counts, writes=[w.line() for w in plan.writes])
        return plan

    async def ask(self, plan: Plan) -> bool:
        """Ask the session's approver ([policy] approver, or ``Session(approver=...)``) once for the whole plan:
        one request (tool ``plan``, its writes as the arguments), which ``cellgate approvals`` and JupyterLab's
        approvals panel show as one item. Approves or denies the plan by the answer, and returns whether it was
        approved; no answer within [policy] approval_timeout is a denial."""
        desk = self.provisioner.gate.approvals
        now = time.time()
        args = {"plan": plan.id, "counts": plan.counts, "writes": [
            {"tool": w.tool, "args": w.args, "decision": w.decision} for w in plan.writes]}
        request = ApprovalRequest(
            id=f"{desk.session_id[:12]}-plan-{plan.id}", session=desk.session_id, seq=0, tool="plan", args=args,
            args_sha256=args_digest(args), cell_line=None, source_line=f"{len(plan.writes)} planned writes",
            requested=now, deadline=now + desk.timeout)
        try:
            async with asyncio.timeout(desk.timeout):
                answer = await desk.approver.ask(request)
        except TimeoutError:
            desk.approver.withdraw(request, "approval-timeout")
            plan.deny(by=desk.approver.name, reason=f"no answer within {desk.timeout:g} s ([policy] approval_timeout)")
            return False
        if answer.decision == "allow":
            plan.approve(by=answer.approver, reason=answer.reason)
        else:
            plan.deny(by=answer.approver, reason=answer.reason)
        return answer.decision == "allow"

    async def apply(self, plan: Plan, timeout: float | None = None) -> CellResult:
        """Run the plan's code here, for real: each write matching a planned one (tool and arguments, each once)
        is approved by the plan's approval; any other write follows its own policy. Refused (SessionError) unless
        the plan is approved, unapplied, made by this session with no cell run since, and within plan_ttl."""
        if plan.owner != str(self.notebook_path):
            raise SessionError(f"plan {plan.id} was made by another session; a plan is applied where it was made")
        plan.checked_for_apply(self._cells_since(plan.mark))
        plan.state = "applied"  # before it runs: a plan is never applied twice, even if this one fails
        self.recorder.event("plan-applied", sync=True, plan=plan.id, approver=plan.approver, reason=plan.reason,
                            writes=len(plan.writes))
        gate = self.provisioner.gate
        gate.applying = Applying(plan)
        try:
            return await self.execute(plan.code, timeout)
        finally:
            gate.applying = None

    def _cells_since(self, mark: int) -> int:
        """The cells this session recorded after ``mark`` (its notes of forks, trials and plans aside)."""
        return sum(1 for cell in self.recorder.cells[mark:]
                   if cell.kind != "markdown" or cell.extra.get("kind") not in LIVE_EVENTS)

    def _take_over(self, fork: Session) -> Session:
        """``Trial.keep``: this object drives ``fork``'s kernel, gate and notebook from now on. The parts a session
        holds move one by one: the fork's into this session (``fork`` is left empty, as a session never started,
        so that no two objects drive one kernel), this session's former ones into a new object that is returned
        for the caller to shut down."""
        former = Session()
        former._options, former._cwd, former.km, former._client = self._options, self._cwd, self.km, self._client
        former._names, former.dead = self._names, self.dead
        self._options, self._cwd, self.km, self._client = fork._options, fork._cwd, fork.km, fork._client
        self._names, self.dead = fork._names, fork.dead
        fork.km, fork._client, fork._names, fork.dead = None, None, None, False
        return former

    async def __aenter__(self) -> Session:
        # A fork (``fork``, a pool's member) is handed over started: ``async with`` it only ends it.
        return self if self.km is not None else await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def aclose(self) -> None:
        """End the session (``shutdown``), for ``contextlib.aclosing`` and the like; forks end the same way."""
        await self.shutdown()

    # -------------------------------------------------------------- running
    @property
    def provisioner(self) -> GVisorProvisioner:
        if self.km is None or not isinstance(self.km.provisioner, GVisorProvisioner):
            raise SessionError(NOT_STARTED)
        return self.km.provisioner

    @property
    def notebook_path(self) -> Path:
        return self.provisioner.started.recorder.notebook_path

    @property
    def sandbox_info(self) -> dict[str, Any]:
        return dict(self.provisioner.started.recorder.metadata["sandbox"])

    @property
    def recorder(self) -> Recorder:
        """The session's journal and notebook writer (an agent loop records its turns through it)."""
        return self.provisioner.started.recorder

    @property
    def manifest(self) -> list[dict[str, Any]]:
        """The session's tools: name, description and JSON Schema of the parameters, in order."""
        return self.provisioner.started.registry.manifest()

    @property
    def policy(self) -> Policy:
        return self.provisioner.started.settings.policy

    @property
    def settings(self) -> Settings:
        """What the session runs with: its cellgate.toml, with the options it was started with applied."""
        return self.provisioner.started.settings

    def claim(self, principal: str) -> None:
        """Whom this session acts for (``cellgate mcp serve``'s authenticated principal), said once, before its
        first cell: policy rules that name ``principals`` match its calls from then on."""
        self.provisioner.claim(principal)

    async def call_tool(self, tool: str, args: dict[str, Any]) -> DirectResult:
        """Call a tool from the host, as a model's direct tool use: gated and recorded as a ``direct`` cell."""
        return await self.provisioner.call_direct(tool, args)

    async def interrupt(self) -> None:
        """Interrupt the running cell (as Ctrl-C in a notebook does); it ends ``interrupted``."""
        await self.provisioner.interrupt()

    async def execute(self, code: str, timeout: float | None = None, traceparent: str | None = None,
                      on_output: Callable[[dict[str, Any]], None] | None = None,
                      on_call: Callable[[dict[str, Any]], None] | None = None, retry: bool = False) -> CellResult:
        """Run ``code`` as one cell; returns when the host has recorded its end. ``traceparent``: the caller's
        trace, which the cell's span continues when the session is traced (sent in the request's metadata).
        ``on_output`` is called on this event loop with each output as it is recorded (as the notebook holds
        it), all of them before this returns; ``on_call`` likewise with each gated call's record as it ends.

        ``retry=True``: the cell retries the session's last failed cell (SessionError if it did not fail): each
        write equal to one an earlier attempt committed is answered from the record, not made again
        (``calls.retry``). Without it, a re-run repeats every write."""
        if retry and not isinstance(retry, bool):
            raise SessionError(f"retry must be True or False, not {retry!r}")
        if retry and retry_of_last_failed(self.provisioner.started.recorder.cells) is None:
            raise SessionError("retry=True: the session's last cell did not fail (or it ran none), so there is "
                               "nothing to retry; run the code without retry")
        return CellResult.from_record(await self._execute(code, timeout, traceparent, on_output, on_call=on_call,
                                                          retry=retry))

    async def run_command(self, argv: Sequence[str], *, timeout: float | None = None) -> CommandResult:
        """Run ``argv`` in the sandbox (no shell unless argv names one, e.g. ``["sh", "-c", line]``), as one cell
        of kind ``command``; ``timeout`` (at most ``[sandbox] cell_timeout``) kills it when it passes. Returns its
        exit code, stdout and stderr (``session.commands``)."""
        args = commands.checked_argv(argv)
        limit = commands.checked_timeout(timeout, self.provisioner.started.settings.sandbox.cell_timeout)
        record = await self._execute(commands.command_code(args, limit), None, None, None, args)
        return commands.command_result(args, record)

    async def install(self, *requirements: str) -> CellResult:
        """``%pip install REQUIREMENT ...`` as one cell: the gated call ``pip_install`` (``calls.packages``: the
        policy decides, the host fetches allowed wheels only); the cell's result says what was installed."""
        for requirement in requirements:
            if not REQUIREMENT.match(requirement):
                raise ConfigError(f"{requirement!r} is not a requirement of the form NAME[==VERSION]; no URL, path "
                                  "or pip option")
        if not requirements:
            raise ConfigError("Session.install needs at least one requirement, e.g. install('humanize==4.9.0')")
        return await self.execute("%pip install " + " ".join(shlex.quote(r) for r in requirements))

    async def upload(self, path: str, data: bytes) -> FileRecord:
        """Write ``data`` to ``path`` in the sandbox (relative: to its working folder; only the workspace and its
        temporary folder), whole or not at all; recorded by sha256, the bytes kept as a blob (``session.files``)."""
        return await files.upload(self.provisioner.started, path, data)

    async def download(self, path: str) -> bytes:
        """The bytes of the file at ``path`` in the sandbox, bounded by ``[sandbox] file_limit_mb``; recorded by
        sha256, the bytes kept as a blob (``session.files``)."""
        return await files.download(self.provisioner.started, path)

    async def _execute(self, code: str, timeout: float | None, traceparent: str | None,
                       on_output: Callable[[dict[str, Any]], None] | None,
                       argv: list[str] | None = None,
                       on_call: Callable[[dict[str, Any]], None] | None = None, retry: bool = False) -> CellRecord:
        if self.dead:
            raise KernelDied("the sandboxed kernel was stopped; call restart() to get a fresh one")
        provisioner = self.provisioner
        started = provisioner.started
        box = started.settings.sandbox
        if self._client is None:
            raise SessionError(NOT_STARTED)
        # As KernelClient.execute sends it, with the metadata it has no parameter for; made first, so that its
        # outputs are followed from the start.
        metadata: dict[str, Any] = {"traceparent": checked_traceparent(traceparent)} if traceparent is not None else {}
        if retry:
            metadata["cellgate"] = {"retry": True}
        msg = self._client.session.msg("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {NAMES: NAMES_EXPRESSION},
            "allow_stdin": False, "stop_on_error": True}, metadata=metadata)
        msg_id = msg["header"]["msg_id"]
        if argv is not None:  # recorded as the command it is, not as the code the host generated for it
            provisioner.expect_command(msg_id, argv, code)
        unfollow = None
        if on_output is not None:
            loop, told = asyncio.get_running_loop(), on_output

            def follower(output: dict[str, Any]) -> None:
                # In order, on this loop, each before the cell's end (both come through call_soon_threadsafe).
                loop.call_soon_threadsafe(told, output)

            unfollow = started.recorder.follow(msg_id, follower)
        unfollow_calls = None
        if on_call is not None:
            calls_loop, told_call = asyncio.get_running_loop(), on_call

            def call_follower(call: dict[str, Any]) -> None:
                calls_loop.call_soon_threadsafe(told_call, call)

            unfollow_calls = started.recorder.follow_calls(msg_id, call_follower)
        future = provisioner.result_future(msg_id)
        self._client.shell_channel.send(msg)
        limit = timeout or (box.cell_timeout + box.interrupt_grace + 60)
        try:
            async with asyncio.timeout(limit):  # not wait_for: see calls.dispatch._run
                record = await asyncio.wrap_future(future)
        finally:
            provisioner.forget_result(msg_id)
            provisioner.forget_command(msg_id)
            if unfollow is not None:
                unfollow()
            if unfollow_calls is not None:
                unfollow_calls()
        await self._drain_replies()
        status = str(record.status)
        if status in ("killed", "kernel-died", "memory") or "message-size" in record.limits_hit:
            self.dead = True
        # The cgroup backstop, or a message over the host's size bound: restart at once, and say what was lost.
        reason = "memory" if status == "memory" else "message-size" if self.dead and \
            "message-size" in record.limits_hit else None
        if reason is not None:
            await self.restart()
            self.recorder.kernel_restarted(reason, self._names)
            self._names = []
        return record

    async def add_tools(self, *tools: ToolSpec) -> None:
        """Add tools to the running session: functions, ``Tool``s, modules, tool module paths or a registry's
        tools, with the policy ``Session(tools=...)`` gives them. The gate knows them at once; the kernel's
        ``tools`` package gains their stubs through a cell (in the notebook, after a note naming them); later
        kernels (restarts) start with them. A name the session has already is a ``ConfigError``, and then
        nothing is added."""
        await tool_additions.add(self.provisioner.started, self.execute, tools)

    def stream(self, code: str, timeout: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """Run ``code`` as one cell and yield what it does as it happens: each output (an nbformat dict, as the
        notebook holds it), each gated call as it ends (``{"event": "call", "tool", "decision", "ok", ...}``),
        then ``{"event": "end", "result": CellResult}``. Closing the iterator early waits for the cell's end."""
        return streaming.stream(self.execute, code, timeout)

    async def _drain_replies(self) -> None:
        """Read execute replies only for the names they list: the host's record, not the reply, is the result."""
        while True:
            try:
                reply = await self._client.get_shell_msg(timeout=0)
            except queue.Empty:
                return
            names = variable_names(reply.get("content", {}))
            if names is not None:
                self._names = names
