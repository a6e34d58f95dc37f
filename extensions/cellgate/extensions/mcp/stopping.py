"""How ``cellgate mcp serve`` stops on SIGTERM: every session paused or closed, its sandbox (a pod) deleted, first.

With ``[mcp] pause_on_stop`` (the default) a session whose backend can checkpoint (local gVisor, as root) is
paused into the server's state folder instead of ended (``Sessions.close_all``): the server started again resumes
it on the next call with its handle, for its owner. The others are ended.

Over HTTP uvicorn turns SIGTERM into the app's shutdown (the lifespan's end) and then ends the process by the
signal. Over stdio nothing would: SIGTERM's default action ends the process there, its sessions' sandboxes (on
Kubernetes a pod each, which costs money) left running. ``run_stdio`` does as uvicorn does: SIGTERM cancels the
server, whose lifespan closes every session (``close_all``, which a cancellation does not cut short), and then
the process ends by the signal (exit status -15). It does not wait for the thread that reads stdin: only a line or
EOF would free it.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from mcp.server.mcpserver import MCPServer

CLOSE_BOUND = 180.0  # seconds closing every session may take at the end (a pod's deletion waits up to 30 s, a
# checkpoint takes ~4 s and the sessions are paused at once)

_terminated = False  # SIGTERM came while run_stdio served


async def close_all(close: Callable[[], Awaitable[None]]) -> None:
    """Run ``close`` to its end (within CLOSE_BOUND) even while the server is cancelled; after a SIGTERM, end the
    process by it."""
    with anyio.move_on_after(CLOSE_BOUND, shield=True):
        await close()
    if _terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)


def run_stdio(server: MCPServer) -> None:
    """Serve over stdio until the client closes it, or SIGTERM (then as the module docstring says)."""
    async def serve() -> None:
        async with anyio.create_task_group() as group:
            async def on_sigterm(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                global _terminated
                with anyio.open_signal_receiver(signal.SIGTERM) as received:
                    task_status.started()
                    async for _ in received:
                        _terminated = True
                        group.cancel_scope.cancel()  # anyio's cancellation: close_all's shield holds against it
                        return
            await group.start(on_sigterm)  # the handler is in place before any sandbox starts
            await server.run_stdio_async()
            group.cancel_scope.cancel()  # the client closed stdin: no signal to wait for

    anyio.run(serve)
