"""Waiting for a session's kernel to answer, on the shell channel alone.

jupyter_client's ``wait_for_ready`` takes a ``kernel_info_reply`` as ready only once an IOPub message also
arrives within 0.2 s, and asks again otherwise: until the kernel's side has the subscription, what it publishes
(a first cell's output) reaches nobody. A session's own client listens on shell alone and the relay reads IOPub
for it, so that check, made on the client, always waited out its 0.2 s, often twice: a third of a cold start.
This asks the same question with the same bounds (a reply, a dead kernel, a deadline), takes the IOPub half from
whoever reads IOPub (``heard``: the relay, which usually has the kernel's welcome by the time of the reply), and
adapts to the kernel's protocol version as jupyter_client does.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from queue import Empty
from typing import Any

ASK_EVERY = 1.0  # seconds between kernel_info_requests while the kernel is silent (jupyter_client's own)
IOPUB_WAIT = 0.2  # seconds a reply waits for IOPub to be heard before the kernel is asked again (likewise)


async def wait_for_kernel_info(client: Any, timeout: float,
                               heard: Callable[[float], Awaitable[bool]] | None = None) -> dict[str, Any]:
    """Ask ``client``'s kernel for its info until it answers (its reply) and ``heard(seconds)`` says its IOPub has
    been heard (asking again otherwise: each request makes the kernel publish its status), it is found dead or
    ``timeout`` passes (RuntimeError, in jupyter_client's words)."""
    deadline = time.monotonic() + timeout
    answered = False
    while True:
        client.kernel_info()
        until = time.monotonic() + ASK_EVERY
        while (left := until - time.monotonic()) > 0:
            try:
                msg: dict[str, Any] = await client.shell_channel.get_msg(timeout=left)
            except Empty:
                break
            if msg["msg_type"] != "kernel_info_reply":
                continue
            answered = True  # to this request or an earlier one: either says the shell is ready
            if heard is None or await heard(IOPUB_WAIT):
                client._handle_kernel_info_reply(msg)  # the protocol version to adapt to, as wait_for_ready does
                return msg
            break  # ask again
        if not await client.is_alive():
            raise RuntimeError("Kernel died before replying to kernel_info")
        if time.monotonic() > deadline:
            if answered:
                raise RuntimeError(f"Kernel answered on shell but nothing it published on IOPub was heard in "
                                   f"{timeout:g} seconds; its output could not be read")
            raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")


__all__ = ["wait_for_kernel_info"]
