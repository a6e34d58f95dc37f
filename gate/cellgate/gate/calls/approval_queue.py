"""The ``queue`` approver: pending requests as files in a folder of their own, answered from another terminal
by `cellgate approvals list|show|approve|deny`.

Each request is ``ID.json``; an answer is ``ID.answer.json``, written once (a second answer fails); a request
whose cell ended is ``ID.withdrawn.json`` for a while, so a late answer is told why. Requests name the host
process that asked, so requests left by a crashed host are withdrawn (``withdraw_orphans``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import write_atomically
from cellgate.gate._terminal import reveal
from cellgate.gate.calls.approval import ApprovalAnswer, ApprovalRequest, Approver
from cellgate.gate.sandbox.liveness import owner_alive, this_process
from cellgate.gate.sandbox.runtime_dir import check_private, private_dir, run_root


def approvals_dir() -> Path:
    """Where the queue lives: ``$CELLGATE_APPROVALS_DIR``, else ``approvals`` in the run root. The queue uses it
    only if it is this user's alone (``runtime_dir``): an answer file there approves a call."""
    return Path(os.environ.get("CELLGATE_APPROVALS_DIR") or run_root() / "approvals")


class QueueApprover(Approver):
    """Writes each request as a file; `cellgate approvals approve|deny ID` answers it."""

    name = "queue"

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = private_dir(folder or approvals_dir())

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
    folder = folder or approvals_dir()
    gone = []
    if folder.is_dir():
        check_private(folder)
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
        requested=_number(data.get("requested"), float), deadline=_number(data.get("deadline"), float),
        principal=None if data.get("principal") is None else str(data.get("principal")))


def _number(value: Any, kind: type) -> Any:
    return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else kind(0)


def pending_request(request_id: str, folder: Path | None = None) -> ApprovalRequest:
    """One queued request by id (what `cellgate approvals show ID` prints)."""
    folder = folder or approvals_dir()
    if not _REQUEST_ID.fullmatch(request_id):
        raise ConfigError(f"{request_id!r} is not an approval request id (letters, digits, - and _); "
                          "`cellgate approvals list` shows them")
    if folder.is_dir():
        check_private(folder)
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
