"""``cellgate exec`` and ``cellgate run``: the notices of calls waiting for approval, printed on stderr.

The printer is a client of the session's IOPub like any frontend, and prints
the text of the host's notices (``session.relay.notices``: display ids the relay
keeps from the kernel), so a terminal shows what a notebook shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from cellgate.gate._errors import SessionError
from cellgate.gate._terminal import clean

if TYPE_CHECKING:
    from cellgate.gate.session.session import Session

READY_TIMEOUT = 60.0  # seconds for the printer's subscription to be live (a kernel_info round trip)
ASK_AGAIN = 0.5  # seconds before a kernel_info whose status did not arrive is sent again


def notice_text(msg: dict[str, Any]) -> str | None:
    """The text of a host notice on IOPub, or None for any other message."""
    from cellgate.gate.session.relay.notices import DISPLAY_PREFIX

    if msg.get("msg_type") not in ("display_data", "update_display_data"):
        return None
    content = msg.get("content") or {}
    display_id = (content.get("transient") or {}).get("display_id")
    text = (content.get("data") or {}).get("text/plain")
    if isinstance(display_id, str) and display_id.startswith(DISPLAY_PREFIX) and isinstance(text, str):
        return text
    return None


@contextlib.asynccontextmanager
async def waiting_notices(session: Session) -> AsyncIterator[None]:
    """While the block runs, print each waiting notice (and how the wait ended) on ``sys.stderr``."""
    from jupyter_client.asynchronous.client import AsyncKernelClient

    if session.km is None:
        raise SessionError("waiting_notices needs a started session; start it first")
    # A client of its own, as any frontend: one made by the session's KernelManager would share its
    # client's identity on the relay's sockets and take its place there.
    client = AsyncKernelClient(connection_file=session.connection_file)
    client.load_connection_file()
    client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
    try:
        with contextlib.suppress(TimeoutError):  # notices are a courtesy: never a reason for the run to fail
            await _subscribed(client)
        async with printing(client):
            yield
    finally:
        client.stop_channels()


@contextlib.asynccontextmanager
async def printing(client: Any) -> AsyncIterator[None]:
    """Print ``client``'s notices while the block runs. A printer that failed is said on stderr when the block
    ends (notices are a courtesy: its failure never fails the run, nor is it dropped)."""
    printer = asyncio.create_task(_print(client), name="cellgate-waiting-notices")
    try:
        yield
    finally:
        printer.cancel()
        await asyncio.wait([printer])  # a cancellation of this task still reaches it
        failed = None if printer.cancelled() else printer.exception()
        if failed is not None:
            sys.stderr.write(f"cellgate: the notices of calls waiting for approval stopped: "
                             f"{type(failed).__name__}: {failed}\n")
            sys.stderr.flush()


async def _subscribed(client: Any) -> None:
    """Wait until IOPub reaches this client: the kernel's status for one of our kernel_info requests arrives
    (a subscription takes a moment to reach the publisher, so a request may go unseen: it is asked again)."""
    sent: set[str] = set()
    async with asyncio.timeout(READY_TIMEOUT):
        while True:
            sent.add(client.kernel_info())
            try:
                msg = await client.get_iopub_msg(timeout=ASK_AGAIN)
                while msg.get("parent_header", {}).get("msg_id") not in sent:
                    msg = await client.get_iopub_msg(timeout=ASK_AGAIN)
                break
            except queue.Empty:
                continue
    for _ in sent:  # the replies, so they do not pile up
        with contextlib.suppress(queue.Empty):
            await client.get_shell_msg(timeout=ASK_AGAIN)


async def _print(client: Any) -> None:
    while True:
        text = notice_text(await client.get_iopub_msg())
        if text is not None:
            sys.stderr.write(clean(text) + "\n")  # looked up each time: rich's live display may proxy it
            sys.stderr.flush()
