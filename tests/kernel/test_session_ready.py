"""A session's client waits for its kernel on shell alone (``session.ready``): a ready kernel is asked once and
answers, and IOPub, which this client never reads, is not opened (jupyter_client's ``wait_for_ready`` waits on it
too: a third of a cold start); a kernel that died is reported as such. A plain ipykernel stands in for
the sandboxed one: what is under test is the client's wait. The IOPub half is asked of whoever reads IOPub (the
relay, in a session): until it has heard the kernel, the kernel is asked again, since a first cell's output
would reach nobody (a restarted kernel's first cell once printed nothing so)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from jupyter_client import AsyncKernelManager

from cellgate.gate.session.ready import wait_for_kernel_info


def with_shell_client(body: Callable[[AsyncKernelManager, Any, list[str]], Awaitable[None]]) -> None:
    async def run() -> None:
        km = AsyncKernelManager(kernel_name="python3")
        await km.start_kernel()
        client = km.client()
        client.start_channels(iopub=False, stdin=False, hb=False, control=False)  # as Session._connect does
        asked: list[str] = []
        ask = client.kernel_info
        client.kernel_info = lambda: asked.append(ask()) or asked[-1]
        try:
            await wait_for_kernel_info(client, timeout=60)  # up
            asked.clear()
            await body(km, client, asked)
        finally:
            client.stop_channels()
            if await km.is_alive():
                await km.shutdown_kernel(now=True)

    asyncio.run(run())


def test_a_ready_kernel_is_asked_once_on_shell_alone() -> None:
    async def body(km: AsyncKernelManager, client: Any, asked: list[str]) -> None:
        reply = await wait_for_kernel_info(client, timeout=60)
        assert reply["msg_type"] == "kernel_info_reply" and reply["parent_header"]["msg_id"] == asked[0]
        assert len(asked) == 1
        assert client._iopub_channel is None  # never opened (jupyter_client's wait opens it and waits on it)

    with_shell_client(body)


def test_a_kernel_that_died_is_reported() -> None:
    async def body(km: AsyncKernelManager, client: Any, asked: list[str]) -> None:
        await km.shutdown_kernel(now=True)
        with pytest.raises(RuntimeError, match="Kernel died before replying to kernel_info"):
            await wait_for_kernel_info(client, timeout=60)

    with_shell_client(body)


def test_a_reply_before_iopub_is_heard_is_not_ready_and_the_kernel_is_asked_again() -> None:
    async def body(km: AsyncKernelManager, client: Any, asked: list[str]) -> None:
        answers = iter([False, False, True])
        waits: list[float] = []

        async def heard(seconds: float) -> bool:
            waits.append(seconds)
            return next(answers)

        reply = await wait_for_kernel_info(client, timeout=60, heard=heard)
        assert reply["msg_type"] == "kernel_info_reply"
        assert len(asked) == 3 and len(waits) == 3 and all(0 < w <= 1 for w in waits)

    with_shell_client(body)


def test_iopub_never_heard_is_reported_as_such_at_the_deadline() -> None:
    async def body(km: AsyncKernelManager, client: Any, asked: list[str]) -> None:
        async def never(seconds: float) -> bool:
            return False

        with pytest.raises(RuntimeError, match="answered on shell but nothing it published on IOPub was heard"):
            await wait_for_kernel_info(client, timeout=1, heard=never)
        assert len(asked) >= 2

    with_shell_client(body)
