"""Approvers: who answers when the policy says a call needs approval.

An ``Approver`` is looked up by name in the ``cellgate.approvers`` entry-point
group (the built-ins are registered the same way): ``deny`` (the default),
``allow``, ``prompt`` (a terminal prompt), ``queue`` (pending requests as
files that ``cellgate approvals`` answers from another terminal). Library
users can pass any callable as ``Session(approver=...)``.

An approval is bound to one call: session, the gate's sequence number, the
tool and the sha256 of the canonical arguments. It is used once.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import io
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.text import Text

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import canonical_json, digest, write_atomically
from cellgate.gate._terminal import head_and_tail, reveal

ENTRY_POINT_GROUP = "cellgate.approvers"


@dataclass(frozen=True)
class ApprovalRequest:
    id: str  # f"{session}-{seq}"
    session: str
    seq: int
    tool: str
    args: dict[str, Any]
    args_sha256: str
    cell_line: int | None
    source_line: str | None
    requested: float  # host clock, epoch seconds
    deadline: float
    # The host process that waits for the answer ({"pid", "start_time"}); a request whose owner is gone is withdrawn.
    owner: dict[str, Any] | None = None


@dataclass(frozen=True)
class ApprovalAnswer:
    decision: Literal["allow", "deny"]
    approver: str
    reason: str = ""
    answered: float = 0.0


class Approver(abc.ABC):
    """Answers approval requests.

    ``ask`` is called by the gate on its event loop, once per call that needs
    approval, and may be awaited concurrently for parallel calls. It returns
    an answer, or raises ``TimeoutError`` when the request's deadline passes
    (the gate then denies with ``approval-timeout``). Subclasses need not call
    ``super()``.
    """

    name = "approver"

    @abc.abstractmethod
    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer: ...

    def withdraw(self, request: ApprovalRequest, reason: str) -> None:
        """The request's cell ended (``reason``: how) while it waited; ``ask`` is cancelled too.

        Called on the gate's loop; the default does nothing. An approver that
        shows requests elsewhere takes them away here.
        """

    def close(self) -> None:
        """Called when the session ends."""


class DenyApprover(Approver):
    name = "deny"

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer("deny", self.name, "no approver is configured ([policy] approver = 'deny')", time.time())


class AllowApprover(Approver):
    name = "allow"

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer("allow", self.name, "auto-approved ([policy] approver = 'allow')", time.time())


class CallbackApprover(Approver):
    """Wraps a callable(request) -> bool | ApprovalAnswer (sync or async)."""

    name = "callback"

    def __init__(self, callback: Callable[[ApprovalRequest], Any]) -> None:
        self.callback = callback

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        if inspect.iscoroutinefunction(self.callback):
            answer = await self.callback(request)
        else:
            answer = await asyncio.to_thread(self.callback, request)
        if isinstance(answer, ApprovalAnswer):
            return answer
        return ApprovalAnswer("allow" if answer is True else "deny", self.name, "", time.time())


ARGS_SHOWN = 1500  # characters of escaped arguments the short view shows (head and tail)


def describe_request(request: ApprovalRequest) -> str:
    """What a person sees: every hidden or look-alike code point escaped, long arguments head and tail.

    The arguments are what the gate validated (secrets as their digests or markers); the cell line is
    the kernel's claim, and the program text shown at it is the host's own copy of the program.
    """
    args = json.dumps(request.args, ensure_ascii=False, sort_keys=True)
    lines = [
        f"tool:      {reveal(request.tool)}",
        f"arguments: {head_and_tail(args, ARGS_SHOWN, f'`cellgate approvals show {reveal(request.id)}` prints all')}",
        f"sha256:    {reveal(request.args_sha256)} (of the arguments; the approval is bound to it)",
    ]
    if request.cell_line is not None:
        lines.append(f"cell line {request.cell_line} (reported by the kernel): {reveal(request.source_line or '')}")
    return "\n".join(lines)


def describe_full(request: ApprovalRequest) -> tuple[str, bool]:
    """`cellgate approvals show`: the complete arguments, every hidden code point escaped and nothing
    folded, and whether their digest is the one the approval is bound to."""
    text = json.dumps(request.args, ensure_ascii=False, sort_keys=True, indent=2)
    args_sha256 = args_digest(request.args)
    matches = args_sha256 == request.args_sha256
    lines = [
        f"request:   {reveal(request.id)} (session {reveal(request.session)}, call {request.seq})",
        f"tool:      {reveal(request.tool)}",
        "arguments (complete; every invisible, format, bidi and non-ASCII space character escaped):",
        *("  " + reveal(line, compress=False) for line in text.split("\n")),
        f"sha256:    {args_sha256} ({len(canonical_json(request.args).encode()):,} bytes of canonical JSON)",
    ]
    if not matches:
        lines.append(f"MISMATCH:  the request names the digest {reveal(request.args_sha256)}; "
                     "these are not the arguments the approval would be bound to: deny it")
    if request.cell_line is not None:
        lines.append(f"cell line {request.cell_line} (reported by the kernel): "
                     f"{reveal(request.source_line or '', compress=False)}")
    return "\n".join(lines), matches


class PromptApprover(Approver):
    """Asks on the controlling terminal, one request at a time."""

    name = "prompt"

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def _ask_blocking(self, request: ApprovalRequest) -> ApprovalAnswer:
        # A terminal is not seekable, so it is opened unbuffered ("r+" through open() would fail to seek).
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        with self._lock, io.TextIOWrapper(io.FileIO(fd, "r+"), write_through=True) as tty:
            console = Console(file=tty, highlight=False)
            console.print(Text.assemble(("approval needed", "bold yellow"), f" (request {reveal(request.id)})"))
            console.print(Text(describe_request(request)))
            console.print("allow this call? [y/N] ", end="", markup=False)
            tty.flush()
            reply = tty.readline().strip().lower()
        return ApprovalAnswer("allow" if reply in ("y", "yes") else "deny", self.name,
                              "answered at the terminal", time.time())

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        remaining = request.deadline - time.time()
        return await asyncio.wait_for(asyncio.to_thread(self._ask_blocking, request), max(remaining, 0))


def approvals_dir() -> Path:
    from cellgate.gate.sandbox.container import run_root

    return Path(os.environ.get("CELLGATE_APPROVALS_DIR") or run_root() / "approvals")


class QueueApprover(Approver):
    """Writes each request as a file; `cellgate approvals approve|deny ID` answers it."""

    name = "queue"

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or approvals_dir()
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        pending = self.folder / f"{request.id}.request.json"
        answer_file = self.folder / f"{request.id}.answer.json"
        write_json_atomically(pending, {**asdict(request), "owner": request.owner or this_process()})
        try:
            while True:
                if answer_file.exists():
                    return self._read_answer(answer_file, request)
                if time.time() >= request.deadline:
                    raise TimeoutError(request.id)
                await asyncio.sleep(0.05)  # polling the folder another process writes to
        finally:
            pending.unlink(missing_ok=True)
            answer_file.unlink(missing_ok=True)  # single use

    def withdraw(self, request: ApprovalRequest, reason: str) -> None:
        withdraw_request(self.folder, request.id, f"its cell ended ({reason})")

    def _read_answer(self, path: Path, request: ApprovalRequest) -> ApprovalAnswer:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return ApprovalAnswer("deny", self.name, "unreadable answer file", time.time())
        if data.get("args_sha256") != request.args_sha256 or data.get("seq") != request.seq:
            return ApprovalAnswer("deny", self.name, "the answer was for different arguments", time.time())
        decision: Literal["allow", "deny"] = "allow" if data.get("decision") == "allow" else "deny"
        return ApprovalAnswer(decision, f"{self.name}:{data.get('by', 'unknown')}", str(data.get("reason", ""))[:500],
                              time.time())


def write_json_atomically(path: Path, data: Any) -> None:
    write_atomically(path, json.dumps(data))


WITHDRAWN_KEPT_SECONDS = 7 * 24 * 3600  # how long `approve ID` can still say why a request is gone


def this_process() -> dict[str, Any]:
    from cellgate.gate.sandbox.container import _process_start_time

    return {"pid": os.getpid(), "start_time": _process_start_time(os.getpid())}


def withdraw_request(folder: Path, request_id: str, reason: str) -> None:
    """Take a request out of the queue and leave a note saying why, for `approve ID` to answer with."""
    note = {"id": request_id, "withdrawn": time.time(), "reason": reason}
    try:
        write_json_atomically(folder / f"{request_id}.withdrawn.json", note)
    except OSError:
        pass
    (folder / f"{request_id}.request.json").unlink(missing_ok=True)
    (folder / f"{request_id}.answer.json").unlink(missing_ok=True)
    cutoff = time.time() - WITHDRAWN_KEPT_SECONDS
    for old in folder.glob("*.withdrawn.json"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            continue


def withdraw_orphans(folder: Path | None = None) -> list[str]:
    """Withdraw the requests whose host process is gone (a crashed session); returns their ids."""
    from cellgate.gate.sandbox.container import owner_alive

    folder = folder or approvals_dir()
    gone = []
    for path in sorted(folder.glob("*.request.json")) if folder.is_dir() else []:
        try:
            owner = json.loads(path.read_text()).get("owner")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(owner, dict) and not owner_alive(owner):
            request_id = path.name.removesuffix(".request.json")
            withdraw_request(folder, request_id, f"the session that asked is gone (host process {owner.get('pid')} "
                                                 "ended without answering it)")
            gone.append(request_id)
    return gone


def _withdrawn_error(folder: Path, request_id: str) -> ConfigError | None:
    try:
        note = json.loads((folder / f"{request_id}.withdrawn.json").read_text())
    except (OSError, ValueError):
        return None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(note.get("withdrawn", 0))))
    return ConfigError(f"approval {request_id!r} was withdrawn at {when}: {note.get('reason', 'no reason recorded')}; "
                       "the tool was not run and will not run. Answer only requests `cellgate approvals list` shows")


def answer(request_id: str, decision: Literal["allow", "deny"], reason: str = "", folder: Path | None = None) -> dict[str, Any]:
    """Answer a queued request (what `cellgate approvals approve|deny` does)."""
    folder = folder or approvals_dir()
    withdraw_orphans(folder)
    try:
        request = asdict(pending_request(request_id, folder))
    except ConfigError:
        withdrawn = _withdrawn_error(folder, request_id) if _REQUEST_ID.fullmatch(request_id) else None
        if withdrawn is not None:
            raise withdrawn from None
        raise
    reply = {"decision": decision, "seq": request["seq"], "args_sha256": request["args_sha256"],
             "reason": reason, "by": f"uid {os.getuid()}"}
    answer_file = folder / f"{request_id}.answer.json"
    if not _create_once(answer_file, json.dumps(reply)):
        raise ConfigError(f"approval request {reveal(request_id)} was already answered; an answer cannot be changed "
                          f"(the session acts on the first one). `cellgate approvals list` shows what is still pending.")
    withdrawn = _withdrawn_error(folder, request_id)  # withdrawn while we answered: the answer counts for nothing
    if withdrawn is not None:
        answer_file.unlink(missing_ok=True)
        raise withdrawn
    return request


_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")


def _create_once(path: Path, text: str) -> bool:
    """Write ``path`` complete and only if it does not exist yet (a hard link never replaces a file)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    write_atomically(temp, text)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)
    return True


def request_from(data: Any) -> ApprovalRequest:
    """A request file's content as an ApprovalRequest (missing or odd fields made harmless)."""
    data = data if isinstance(data, dict) else {}
    args = data.get("args")
    line = data.get("cell_line")
    return ApprovalRequest(
        id=str(data.get("id", "?")), session=str(data.get("session", "?")), seq=_number(data.get("seq"), int),
        tool=str(data.get("tool", "?")), args=args if isinstance(args, dict) else {"(not an object)": args},
        args_sha256=str(data.get("args_sha256", "")),
        cell_line=line if isinstance(line, int) and not isinstance(line, bool) else None,
        source_line=None if data.get("source_line") is None else str(data.get("source_line")),
        requested=_number(data.get("requested"), float), deadline=_number(data.get("deadline"), float))


def _number(value: Any, kind: type) -> Any:
    return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else kind(0)


def pending_request(request_id: str, folder: Path | None = None) -> ApprovalRequest:
    """One queued request by id (what `cellgate approvals show ID` prints)."""
    folder = folder or approvals_dir()
    if not _REQUEST_ID.fullmatch(request_id):
        raise ConfigError(f"{request_id!r} is not an approval request id (letters, digits, - and _); "
                          "`cellgate approvals list` shows them")
    try:
        return request_from(json.loads((folder / f"{request_id}.request.json").read_text()))
    except FileNotFoundError:
        raise ConfigError(f"no pending approval {request_id!r} in {folder}; `cellgate approvals list` shows them") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the approval request {request_id!r} in {folder} is unreadable ({exc}); "
                          "it cannot be approved: deny it or let it time out") from None


def pending_requests(folder: Path | None = None) -> list[dict[str, Any]]:
    folder = folder or approvals_dir()
    withdraw_orphans(folder)
    requests = []
    for path in sorted(folder.glob("*.request.json")) if folder.is_dir() else []:
        try:
            requests.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return requests


def args_digest(args: dict[str, Any]) -> str:
    return digest(args)


def load_approver(spec: str | Approver | Callable[..., Any]) -> Approver:
    """An approver by entry-point name, an Approver instance, or a callback."""
    if isinstance(spec, Approver):
        return spec
    if callable(spec):
        return CallbackApprover(spec)
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if spec not in found:
        raise ConfigError(f"[policy] approver = {spec!r} is not a known approver; choose one of: "
                          f"{', '.join(sorted(found)) or 'deny, allow, prompt, queue'}")
    approver_class = found[spec].load()
    return approver_class()  # type: ignore[no-any-return]


__all__ = [
    "Approver", "ApprovalRequest", "ApprovalAnswer", "DenyApprover", "AllowApprover", "PromptApprover",
    "QueueApprover", "CallbackApprover", "load_approver", "answer", "pending_requests", "describe_request",
    "describe_full", "pending_request", "request_from",
    "withdraw_orphans",
]
