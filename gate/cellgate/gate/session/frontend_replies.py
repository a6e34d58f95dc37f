"""What the host answers a frontend itself, for a cell the kernel never ran or never finished.

A kernel that was killed never replies, restricted mode refuses a program
before the kernel sees it, and a cell that cannot be recorded is not run: in
each case the frontend gets the error output, idle status and execute_reply a
kernel would have sent for a failed cell, so it does not hang.
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


def on_subshell() -> dict[str, Any]:
    return failure("SubshellUnsupported", "cellgate runs cells on the kernel's main shell only: a cell on a kernel "
                                          "subshell would run outside the host's one-cell-at-a-time record and gate "
                                          "(issue 19); run it without a subshell_id")


def audit_unavailable(problem: str) -> dict[str, Any]:
    return failure("AuditUnavailable", f"{problem}; cellgate does not run a cell it cannot record: the operator "
                                       "must fix the audit storage")


async def answer(session: Session, iopub: zmq.asyncio.Socket | None, shell: zmq.asyncio.Socket,
                 header: dict[str, Any], idents: list[bytes], error: dict[str, Any]) -> None:
    """Send the error output, idle status and execute_reply (signed with the frontends' ``session``)."""
    error = {"status": "error", **error}
    if iopub is None or iopub.closed:
        return
    for msg_type, content in (("error", {k: error[k] for k in ("ename", "evalue", "traceback")}),
                              ("status", {"execution_state": "idle"})):
        msg = session.msg(msg_type, content, parent=header)
        await iopub.send_multipart([f"kernel.{msg_type}".encode(), *session.serialize(msg)])
    reply = session.msg("execute_reply", error, parent=header)
    await shell.send_multipart(session.serialize(reply, ident=idents))
