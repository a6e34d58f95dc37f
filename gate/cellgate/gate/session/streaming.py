"""``Session.stream``: one cell's outputs and gated calls as they are recorded, then its result.

Built on ``Session.execute(on_output=, on_call=)``, which the recorder tells (``Recorder.follow`` and
``follow_calls``) on the session's loop, in the order they were recorded and all before the cell's end: the items
come out of one queue in that order, and the cell's end is the last of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

# Session.execute (its CellResult is not named here: session imports this module, never the other way)
Execute = Callable[..., Coroutine[Any, Any, object]]
_END = object()


def call_event(call: dict[str, Any]) -> dict[str, Any]:
    """A call's record (as the cell's metadata holds it) as a stream item."""
    return {"event": "call", **call}


async def stream(execute: Execute, code: str, timeout: float | None = None) -> AsyncIterator[dict[str, Any]]:
    items: asyncio.Queue[Any] = asyncio.Queue()
    cell = asyncio.ensure_future(execute(code, timeout, on_output=items.put_nowait,
                                         on_call=lambda call: items.put_nowait(call_event(call))))
    # After every output and call: execute tells them on this loop before it returns.
    cell.add_done_callback(lambda _: items.put_nowait(_END))
    try:
        while (item := await items.get()) is not _END:
            yield item
        yield {"event": "end", "result": cell.result()}  # execute's error (KernelDied, ...) is raised here
    except asyncio.CancelledError:
        cell.cancel()
        raise
    finally:
        if not cell.done():  # the reader left early (closed the iterator): the cell still ends, and is recorded
            await asyncio.shield(cell)
