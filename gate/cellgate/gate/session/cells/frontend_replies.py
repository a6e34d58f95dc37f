"""What the host answers a frontend itself, for a cell the kernel never ran or never finished.

A kernel that was killed never replies, restricted mode refuses a program
before the kernel sees it, a cell that cannot be recorded is not run, nor one
sent to a subshell the host does not know, and a deleted subshell never runs
the cells queued on it: in each case the frontend gets the error output, idle
status and execute_reply a kernel would have sent for a failed cell, so it
does not hang. A subshell past the host's bound is refused with the
``create_subshell_reply`` the kernel would send for a failure.
"""

from __future__ import annotations

from typing import Any

import zmq.asyncio
from jupyter_client.session import Session


def failure(ename: str, evalue: str, execution_count: int | None = None) -> dict[str, Any]:
    """The content of a failed cell's error output and execute_reply."""
    return {"ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"], "execution_count": execution_count}


def killed(reason: str, execution_count: int | None) -> dict[str, Any]:
    return failure("CellKilled", f"the sandboxed kernel was stopped ({reason}); its variables are gone. "
                                 "Restart the kernel to continue.", execution_count)


def restricted(problems: list[str]) -> dict[str, Any]:
    evalue = ("restricted mode refused this program before it ran: " + "; ".join(problems))[:4000]
    return failure("RestrictedCompileError", evalue)


def nothing_to_retry() -> dict[str, Any]:
    return failure("NothingToRetry", "this cell was sent as a retry, but the session's last cell did not fail (or "
                                     "there is none): a retry continues a failed cell. Send it without retry")


def unknown_subshell(subshell_id: Any) -> dict[str, Any]:
    return failure("UnknownSubshell", f"the cell was sent to subshell {str(subshell_id)[:80]!r}, which the host did "
                                      "not see this kernel create; create one with a create_subshell_request on the "
                                      "control channel and send the cell with the subshell_id of its reply")


def subshell_limit(limit: int) -> dict[str, Any]:
    """The content of the host's ``create_subshell_reply`` when the kernel has its subshells already."""
    return {"status": "error", "ename": "SubshellLimit", "traceback": [],
            "evalue": f"this kernel has the {limit} subshells the host allows; delete one "
                      "(delete_subshell_request) before creating another"}


def subshell_deleted(subshell_id: str) -> dict[str, Any]:
    return failure("SubshellDeleted", f"subshell {subshell_id!r} was deleted before this cell, queued on it, ran; "
                                      "send it again on a shell that exists")


def audit_unavailable(problem: str) -> dict[str, Any]:
    return failure("AuditUnavailable", f"{problem}; cellgate does not run a cell it cannot record: the operator "
                                       "must fix the audit storage")


async def answer(session: Session, iopub: zmq.asyncio.Socket | None, shell: zmq.asyncio.Socket,
                 header: dict[str, Any], idents: list[bytes], error: dict[str, Any], count: int) -> None:
    """Send the error output, idle status and execute_reply (signed with the frontends' ``session``); the reply's
    execution_count is the cell's, else ``count`` (the kernel's counter): frontends add to it (jupyter console)."""
    error = {"status": "error", **error}
    if not isinstance(error.get("execution_count"), int):
        error["execution_count"] = count
    if iopub is None or iopub.closed:
        return
    for msg_type, content in (("error", {k: error[k] for k in ("ename", "evalue", "traceback")}),
                              ("status", {"execution_state": "idle"})):
        msg = session.msg(msg_type, content, parent=header)
        await iopub.send_multipart([f"kernel.{msg_type}".encode(), *session.serialize(msg)])
    reply = session.msg("execute_reply", error, parent=header)
    await shell.send_multipart(session.serialize(reply, ident=idents))
