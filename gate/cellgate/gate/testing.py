"""Test seams shipped as public API (as httpx ships MockTransport).

``BlockingSession`` drives a ``Session`` from synchronous code (tests,
notebooks, scripts) by running its event loop on a private thread.
(The Anthropic Messages API's fake is ``cellgate.extensions.anthropic.testing``.)
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from cellgate.gate.session.session import CellResult, Session

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


# Values that differ between two runs of the same script: times, durations, random ids, hashes of them.
VOLATILE_KEYS = frozenset({"started", "ended", "time", "duration_ms", "session_id", "journal", "id",
                           "idempotency_key", "requested", "answered", "versions", "sandbox", "cellgate_version"})


def normalize_notebook(nb: Any) -> dict[str, Any]:
    """An audit notebook with run-specific values replaced, for golden comparisons of scripted runs."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("<volatile>" if k in VOLATILE_KEYS else clean(v)) for k, v in sorted(value.items())}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    data = json.loads(json.dumps(nb))
    return {"metadata": clean(data.get("metadata", {}).get("cellgate", {}).get("agent")),
            "cells": [clean({"cell_type": c["cell_type"], "source": c["source"], "outputs": c.get("outputs"),
                             "metadata": c.get("metadata", {})}) for c in data["cells"]]}
