"""`cellgate replay`: rerun a recorded run with the recorded tool results.

A fresh sandboxed kernel gets the recorded tool set (stubs from the recorded
manifest) and re-executes the recorded cells in order (a ``command`` cell runs
its argv again); each file the run uploaded is put back from its blob, checked,
before the cell that came after it. The recording is
untrusted input: the sandbox settings, policy and live tools are the
operator's (``replay_trust``), and recorded results are read only from the
run's own blobs after their size and sha256 check out (``artifacts``). ``ReplayGate``
answers each call from the recording, matched by order, tool and argument
digest; a call that differs raises ``ReplayDivergence`` in the cell, naming
the cell, the call and both argument sets. No call reaches a real tool unless
it is named with ``--live`` (then policy and approvals apply). Replay stops
at the first cell that failed in the recording and says whether the failure
reproduced; ``--interactive`` leaves the kernel running there, behind the
same gate and recorder, for a person to attach to (``ReplayGate.attach``,
``attended``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import canonical_json
from cellgate.gate.audit.artifacts import ArtifactError, blob_value, open_confined, read_capped, run_name
from cellgate.gate.audit.notebook_file import journal_of, load_notebook
from cellgate.gate.calls.dispatch import CallFailed, CallRecord, CallScope, Dispatcher
from cellgate.gate.calls.packages import TOOL_NAME as PIP_TOOL
from cellgate.gate.calls.packages import PackageInstaller, PackageRefused
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.registry import Tool, ToolRegistry
from cellgate.gate.network.exchange import TOOL_NAME as HTTP_TOOL
from cellgate.gate.ops.replay_trust import check_image, live_tools, operator_settings

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
UPLOADS_ONLY = "uploads-only"  # not a cell: the files uploaded after the recording's last cell


@dataclass
class RecordedCall:
    tool: str
    args: Any
    args_sha256: str
    ok: bool
    result: Any
    error: dict[str, str] | None
    used: bool = False


@dataclass(frozen=True)
class RecordedUpload:
    """A file the recorded session uploaded (a ``file-uploaded`` cell), put back before the next cell runs."""

    path: str
    size: int
    sha256: str
    blob: str
    folder: Path
    journal_file: str

    def read(self, limit: int) -> bytes:
        """Its bytes from the run's own blob, after its name, type, size and sha256 check out."""
        what = f"the uploaded file {self.path!r}: its blob"
        if not _DIGEST.match(self.sha256):
            raise ArtifactError(f"{what} has no valid sha256 ({self.sha256[:80]!r}); the recording is damaged or "
                                "forged")
        expected = f"{run_name(self.journal_file)}.blobs/{self.sha256}.bin"
        if self.blob != expected:
            raise ArtifactError(f"{what} is named {self.blob[:200]!r}, not {expected!r}; the recording is damaged "
                                "or forged")
        if not 0 <= self.size <= limit:
            raise ArtifactError(f"{what} is {self.size:,} bytes, over [sandbox] file_limit_mb ({limit:,} bytes) of "
                                "this replay; raise file_limit_mb to replay it")
        data = read_capped(open_confined(self.folder, self.blob, what), self.size, f"{what} {self.blob!r}",
                           "its recorded size: it was replaced or damaged")
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise ArtifactError(f"{what} {self.blob!r} does not match its recorded size and sha256: it was "
                                "replaced or damaged; replay refuses to put it back")
        return data


@dataclass
class RecordedCell:
    source: str
    status: str
    error: dict[str, str] | None
    calls: list[RecordedCall] = field(default_factory=list)
    argv: list[str] | None = None  # a command cell's (``Session.run_command``)
    uploads: list[RecordedUpload] = field(default_factory=list)  # files uploaded before it, in order


def _result(call: dict[str, Any], folder: Path, journal_file: str, where: str) -> Any:
    if "result" in call:
        return call["result"]
    if call.get("result_blob"):
        try:  # only the run's own blob, a regular file of the recorded size and sha256
            return blob_value(folder, journal_file, call, where)
        except ArtifactError as exc:
            raise ArtifactError(f"{exc}; replay refuses to answer from it") from None
    return None


def load_recording(path: Path) -> tuple[Any, list[RecordedCell]]:
    nb = load_notebook(path)
    journal_file = journal_of(path, nb)
    cells: list[RecordedCell] = []
    uploads: list[RecordedUpload] = []
    number = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            upload = _recorded_upload(cell, path.parent, journal_file)
            if upload is not None:
                uploads.append(upload)
            continue
        number += 1
        try:
            cells.append(_recorded_cell(cell, number, path.parent, journal_file))
            cells[-1].uploads, uploads = uploads, []
        except ConfigError:  # an ArtifactError, already naming the call
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ConfigError(f"{path}: cell {number}'s metadata.cellgate is malformed ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); the notebook is damaged or forged: check it with "
                              "`cellgate verify`") from None
    if uploads:  # after the last cell: put back too, for a person attached to the replay
        cells.append(RecordedCell(source="", status=UPLOADS_ONLY, error=None, uploads=uploads))
    return nb, cells


def _recorded_upload(cell: Any, folder: Path, journal_file: str) -> RecordedUpload | None:
    meta = cell.get("metadata", {}).get("cellgate", {})
    if not isinstance(meta, dict) or meta.get("kind") != "file-uploaded":
        return None
    size = meta.get("size")
    return RecordedUpload(path=str(meta.get("path", "")), size=size if isinstance(size, int) else -1,
                          sha256=str(meta.get("sha256", "")), blob=str(meta.get("blob", "")), folder=folder,
                          journal_file=journal_file)


def _recorded_cell(cell: Any, number: int, folder: Path, journal_file: str) -> RecordedCell:
    meta = cell.metadata.get("cellgate", {})
    calls = []
    for c in sorted(meta.get("calls", []), key=lambda c: int(c["seq"])):
        where = f"cell {number}, call #{c.get('seq')} ({c.get('tool')})"
        calls.append(RecordedCall(tool=str(c["tool"]), args=c.get("args"), args_sha256=str(c.get("args_sha256", "")),
                                  ok=bool(c.get("ok")),
                                  result=_result(c, folder, journal_file, where) if c.get("ok") else None,
                                  error=_error(c.get("error"))))
    argv = meta.get("argv") if meta.get("kind") == "command" else None
    if argv is not None and not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise ValueError(f"the command cell's argv is {str(argv)[:200]!r}, not a list of strings")
    return RecordedCell(source=str(cell.source), status=str(meta.get("status")), error=_error(meta.get("error")),
                        calls=calls, argv=argv)


def _error(value: Any) -> dict[str, str] | None:
    return dict(value) if isinstance(value, dict) else None


def _replayed_only(name: str) -> Any:
    def not_live(**_: Any) -> Any:  # pragma: no cover - the replay gate never calls it
        raise RuntimeError(f"tool {name!r} is answered from the recording")

    return not_live


def recorded_registry(nb: Any, real: dict[str, Tool]) -> ToolRegistry:
    """The recorded tool set; the ``real`` (live) ones are the operator's own tools, never a recorded path."""
    tools_meta = nb.metadata.cellgate.get("tools", {})
    registry = ToolRegistry()
    for entry in tools_meta.get("manifest", []):
        name = entry["name"]
        if name in real:
            registry.add(real[name])
            continue
        parameters = dict(entry["parameters"])
        properties = parameters.get("properties") or {}
        order = [n for n in entry.get("order", []) if n in properties]
        parameters["properties"] = {n: properties[n] for n in [*order, *(p for p in properties if p not in order)]}
        registry.add(Tool(name, entry.get("description", ""), parameters, _replayed_only(name),
                          source="recording", default_decision="allow"))
    return registry


class ReplayGate(Dispatcher):
    """Answers calls from a recording; only ``live`` tools reach real functions.

    While replaying, the n-th call of a cell must be the recording's n-th
    (tool and argument digest). Once a person is attached (``attach``), a call
    identical to a recorded one is answered from the recording in any order
    and as often as it is made: the recorded cell replay stopped at first,
    then the nearest other cell with that call; a cell that made the same call
    several times gives its answers in recorded order, then its last again. A
    call the recording never made is refused, never run.
    """

    answers_from_record = True  # a request of the network too: answered from the recording, never sent

    def __init__(self, *args: Any, recording: list[RecordedCell], live: set[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recording = recording
        self.live = live
        self.cell_index = -1
        self.position = 0
        self.live_calls = 0
        self.stopped_at: int | None = None  # the recorded cell replay stopped at, once a person is attached
        self._repeats: dict[tuple[str, str], int] = {}  # identical calls answered in this attached cell
        self.packages: PackageInstaller | None = None  # the replay session's layer, for recorded pip_install calls

    def new_cell(self) -> None:
        super().new_cell()
        self.cell_index += 1
        self.position = 0
        self._repeats.clear()

    def attach(self) -> None:
        """Replay is over: the cells from now on are a person's, at the cell replay stopped at."""
        self.stopped_at = min(max(self.cell_index, 0), len(self.recording) - 1) if self.recording else -1

    async def _decide_and_run(self, request: CallRequest, record: CallRecord, context: CallScope,
                              secrets: list[str], given: Tool | None = None) -> tuple[Any, Any, bytes]:
        if request.tool in self.live:
            self.live_calls += 1
            return await super()._decide_and_run(request, record, context, secrets, given)
        record.decision = "replayed"
        record.rule = "recording"
        recorded = self._next(request, record)
        if not recorded.ok:
            error = recorded.error or {"kind": "failed", "message": "the recorded call failed"}
            raise CallFailed(error.get("kind", "failed"), error.get("message", ""))  # type: ignore[arg-type]
        if request.tool == PIP_TOOL:  # the recorded wheels, again, by hash: what the cells import is the same
            if self.packages is None:
                raise CallFailed("failed", "this replay has no package layer for the recorded pip_install")
            try:
                await asyncio.to_thread(self.packages.reinstall, recorded.result)
            except PackageRefused as exc:
                raise CallFailed("failed", f"the recorded packages could not be put back: {exc}") from None
        return recorded.result, recorded.result, canonical_json(recorded.result).encode()

    def _next(self, request: CallRequest, record: CallRecord) -> RecordedCall:
        if self.stopped_at is not None:
            return self._identical(request, record)
        in_recording = 0 <= self.cell_index < len(self.recording)
        if in_recording and request.tool == HTTP_TOOL:
            # Requests of the network come from many clients and threads at once: matched by method, URL, headers
            # and body digest (the arguments), the first unused of the cell's, in recorded order.
            for call in self.recording[self.cell_index].calls:
                if not call.used and call.tool == HTTP_TOOL and call.args_sha256 == record.args_sha256:
                    call.used = True
                    return call
        elif in_recording:
            calls = [c for c in self.recording[self.cell_index].calls if c.tool not in self.live]
            if self.position < len(calls):
                expected = calls[self.position]
                self.position += 1
                if expected.tool == request.tool and expected.args_sha256 == record.args_sha256:
                    expected.used = True
                    return expected
                raise CallFailed("divergence", (
                    f"replay diverged in cell {self.cell_index + 1} at call {self.position}: the recording has "
                    f"{expected.tool}({json.dumps(expected.args, sort_keys=True)}) but the program called "
                    f"{request.tool}({json.dumps(record.args, sort_keys=True)})"))
        # A call past the cell's recorded ones: any unused recorded call with the same tool and arguments.
        for cell in self.recording:
            for call in cell.calls:
                if not call.used and call.tool == request.tool and call.args_sha256 == record.args_sha256:
                    call.used = True
                    return call
        where = f"cell {self.cell_index + 1}" if in_recording else "a cell past the recording"
        raise CallFailed("divergence", (
            f"replay has no recorded result for {request.tool}({json.dumps(record.args, sort_keys=True)}) in {where}; "
            f"rerun with --live {request.tool} to call the real tool"))

    def _identical(self, request: CallRequest, record: CallRecord) -> RecordedCall:
        """An attached person's call: the recorded answer to an identical call, or a refusal saying how to go live."""
        key = (request.tool, record.args_sha256)
        for cell in self._nearest_first():
            same = [c for c in cell.calls if (c.tool, c.args_sha256) == key]
            if same:
                answered = self._repeats[key] = self._repeats.get(key, 0) + 1
                return same[min(answered, len(same)) - 1]
        recorded = [json.dumps(c.args, sort_keys=True)[:200] for cell in self.recording for c in cell.calls
                    if c.tool == request.tool]
        known = (f"; the recording's {request.tool} calls had {', '.join(recorded[:3])}"
                 f"{' ...' if len(recorded) > 3 else ''}") if recorded else ""
        raise CallFailed("divergence", (
            f"replay has no recorded result for {request.tool}({json.dumps(record.args, sort_keys=True)}): the "
            f"recording never made this call, so it was not run{known}. Only a call with the same tool and "
            f"arguments as a recorded one is answered here; to call the real tool, run the replay again with "
            f"`--live {request.tool} --tools MODULE.py` (policy and approvals then apply)"))

    def _nearest_first(self) -> list[RecordedCell]:
        at = self.stopped_at if self.stopped_at is not None else -1
        order = sorted(range(len(self.recording)), key=lambda i: (abs(i - at), i > at))
        return [self.recording[i] for i in order]


async def attended(session: Any, stop: asyncio.Event, say: Callable[[str], None]) -> str:
    """Keep the kernel for an attached person until it exits (the client's `exit`) or ``stop`` is set.

    ``stop`` (Ctrl-C or SIGTERM) while a cell runs interrupts that cell, since
    `jupyter console --existing` cannot; set again while the same cell still
    runs, or with none running, it ends the wait. Returns what ended it.
    """
    kernel_gone = asyncio.ensure_future(session.provisioner.wait())
    interrupted = None
    try:
        while True:
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({kernel_gone, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if kernel_gone.done():
                return (f"the kernel exited (exit code {kernel_gone.result()}; `exit` or `quit` in jupyter console "
                        f"shuts it down); replay ended")
            stop.clear()
            running = await session.provisioner.running_cell()
            if running is None or running is interrupted:
                return "replay ended (Ctrl-C)"
            interrupted = running
            await session.interrupt()
            say("interrupted the running cell; Ctrl-C again while it still runs ends the replay")
    finally:
        kernel_gone.cancel()


@dataclass
class ReplayOutcome:
    cells_run: int
    failed_cell: int | None  # 1-based index of the recorded failure replay stopped at
    reproduced: bool | None
    live_calls: int
    lines: list[str]


def same_failure(recorded: RecordedCell, status: str, error: dict[str, str] | None) -> bool:
    if recorded.status in ("error", "interrupted"):
        return status == recorded.status and (error or {}) == (recorded.error or {})
    return status == recorded.status


async def run_recorded(session: Any, recorded: RecordedCell) -> Any:
    """Run a recorded cell again: its code, or the command it ran (with the cell's error, for ``same_failure``)."""
    if recorded.argv is None:
        return await session.execute(recorded.source)
    from cellgate.gate.session.commands import command_code
    from cellgate.gate.session.session import CellResult

    record = await session._execute(command_code(recorded.argv, None), None, None, None, recorded.argv)
    return CellResult.from_record(record)


async def replay(path: Path, live: set[str], output: Path, config: str | None = None,
                 interactive: bool = False, stop: Any = None, say: Any = print, *, tools: Sequence[str | Path] = (),
                 unsafe_no_sandbox: bool = False, note: Any = None, allow_other_image: bool = False) -> ReplayOutcome:
    """Re-execute a recorded run; with ``interactive`` keep the kernel until ``stop`` is set.

    Settings, policy and live tools are the operator's (``replay_trust``);
    ``note`` gets what the operator should know before the cells run.
    """
    from functools import partial

    from cellgate.gate.session.session import Session

    note = note or say
    settings, config_file = operator_settings(path, config, unsafe_no_sandbox, note)
    nb, cells = load_recording(path)
    meta = nb.metadata.cellgate
    real, differences = live_tools(settings, tools, live, meta.get("tools", {}).get("manifest", []), config_file)
    for line in differences:
        note(line)
    registry = recorded_registry(nb, real)
    origin = {"replay_of": {"notebook": str(path.resolve()), "session_id": meta.get("session_id"),
                            "journal": meta.get("journal"), "live": sorted(live),
                            "config": str(config_file) if config_file else None,
                            "live_differences": differences}}
    factory = partial(ReplayGate, recording=cells, live=live)
    lines: list[str] = []
    failed_at, reproduced = None, None
    # The operator's settings are handed over whole: nothing is looked up again from a working directory.
    installs = any(call.tool == PIP_TOOL for cell in cells for call in cell.calls)
    session = Session(settings=settings, tools=list(tools), notebook=output, registry=registry,
                      gate_factory=factory, metadata=origin, package_layer=installs)
    await session.start()
    try:
        # Before any recorded cell runs: what the cells import is the image's.
        recorded_sandbox = meta.get("sandbox")
        recorded_image = recorded_sandbox.get("image") if isinstance(recorded_sandbox, dict) else None
        # Unsandboxed (--unsafe-no-sandbox) there is no image to match: what differs is said, not refused.
        check_image(recorded_image, session.sandbox_info.get("image"),
                    allow_other_image or settings.sandbox.isolation != "gvisor", note)
        gate = session.provisioner.gate
        assert isinstance(gate, ReplayGate)  # made by `factory`
        gate.packages = session.provisioner.started.packages
        limit = settings.sandbox.file_limit_mb << 20
        for index, recorded in enumerate(cells, start=1):
            for upload in recorded.uploads:  # the files it may read, as they were
                placed = await session.upload(upload.path, upload.read(limit))
                say(f"put back {placed.path} ({placed.size:,} bytes, sha256 {placed.sha256[:16]}…) before cell {index}")
            if recorded.status == UPLOADS_ONLY:
                continue
            result = await run_recorded(session, recorded)
            note = f"cell {index}: recorded {recorded.status}, replayed {result.status}"
            lines.append(note)
            say(note)
            if recorded.status != "ok":
                failed_at, reproduced = index, same_failure(recorded, result.status, result.error)
                verdict = "reproduced" if reproduced else "did NOT reproduce"
                detail = f" ({(recorded.error or {}).get('ename')}: {(recorded.error or {}).get('evalue')})" \
                    if recorded.error else ""
                lines.append(f"the recorded failure of cell {index}{detail} {verdict}")
                say(lines[-1])
                break
            if result.status != "ok":
                lines.append(f"cell {index} failed in replay but not in the recording: "
                             f"{(result.error or {}).get('ename')}: {(result.error or {}).get('evalue')}")
                say(lines[-1])
                failed_at, reproduced = index, False
                break
        say(f"live calls: {gate.live_calls}; replay notebook: {session.notebook_path}")
        if interactive:
            gate.attach()
            say(f"the kernel is left running at that point; attach with:\n"
                f"  jupyter console --existing {session.connection_file}\n"
                f"Cells you run there are gated and recorded; a call identical to a recorded one (same tool and "
                f"arguments) gets the recorded answer, any other is refused unless its tool is --live. `exit` or "
                f"`quit` in the console shuts the kernel down and ends the replay (Ctrl-D only detaches). "
                f"Ctrl-C here interrupts a running cell (jupyter console cannot interrupt a kernel it did not "
                f"start); with no cell running it ends the replay.")
            say(await attended(session, stop, say))
        return ReplayOutcome(len(lines), failed_at, reproduced, gate.live_calls, lines)
    finally:
        await session.shutdown()
