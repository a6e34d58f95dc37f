"""Test seams shipped as public API (as httpx ships MockTransport).

``BlockingSession`` drives a ``Session`` from synchronous code (tests,
notebooks, scripts) by running its event loop on a private thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from .session import CellResult, Session

T = TypeVar("T")


class BlockingSession:
    def __init__(self, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cellgate-session", daemon=True)
        self._thread.start()
        self.session = Session(**options)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 900) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> BlockingSession:
        self._run(self.session.start())
        return self

    def execute(self, code: str, timeout: float | None = None) -> CellResult:
        return self._run(self.session.execute(code, timeout))

    def restart(self) -> None:
        self._run(self.session.restart())

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self.session.shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> BlockingSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
