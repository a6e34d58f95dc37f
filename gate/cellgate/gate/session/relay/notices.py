"""What the host shows a cell's frontends while one of its calls waits for a person.

A transient display (``display_data`` with ``transient.display_id``) parented
to the cell's ``execute_request``, sent by the host on the frontends' IOPub
and signed with their key, names the tool, the request id, the approver and
the deadline; an ``update_display_data`` with the same id replaces it with
how the wait ended. Display ids starting with ``DISPLAY_PREFIX`` are the
host's: the relay strips them from the kernel's displays (``relaywire``), so
the sandbox can neither forge nor overwrite a notice.

The notice is not recorded in the audit notebook: the call's record already
holds its approval (approver, requested, answered, decision), and a transient
display is by definition not part of what a notebook saves.
"""

from __future__ import annotations

import html
import time
from typing import Any

import zmq.asyncio
from jupyter_client.session import Session

from cellgate.gate._terminal import reveal
from cellgate.gate.audit.sanitize import clean_html
from cellgate.gate.calls.asking import Waiting

DISPLAY_PREFIX = "cellgate-approval-"


def display_id(notice: Waiting) -> str:
    return f"{DISPLAY_PREFIX}{notice.request}"


def text(notice: Waiting) -> str:
    """One line: every character of the (sandbox-supplied) tool name that could hide or act is escaped."""
    tool, request, approver = reveal(notice.tool[:200]), reveal(notice.request), reveal(notice.approver)
    if notice.outcome is None:
        deadline = time.strftime("%H:%M:%S UTC", time.gmtime(notice.deadline))
        hint = f"; `cellgate approvals approve {request}` answers it" if approver == "queue" else ""
        return (f"[cellgate] waiting for approval: tool '{tool}', request {request}, approver {approver}, "
                f"until {deadline}{hint}")
    return f"[cellgate] approval {notice.outcome}: tool '{tool}', request {request}, approver {approver}"


def bundle(notice: Waiting) -> dict[str, Any]:
    """The display's content: text/plain, and the same text escaped (and sanitized) in a <pre> as text/html."""
    line = text(notice)
    return {"data": {"text/plain": line, "text/html": clean_html(f"<pre>{html.escape(line)}</pre>")}, "metadata": {},
            "transient": {"display_id": display_id(notice)}}


async def publish(session: Session, iopub: zmq.asyncio.Socket | None, parent: dict[str, Any],
                  notice: Waiting) -> None:
    """Send the notice (or its update, once answered) to the frontends, as a reply to ``parent``."""
    if iopub is None or iopub.closed:
        return
    msg_type = "display_data" if notice.outcome is None else "update_display_data"
    msg = session.msg(msg_type, bundle(notice), parent=parent)
    await iopub.send_multipart([f"kernel.{msg_type}".encode(), *session.serialize(msg)])
