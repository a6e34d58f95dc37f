"""The relay's task owner (``session.events.Tasks``) behaves as a task group: a child's failure is never dropped,
it cancels the siblings and runs the owner's failure handler once; and the relay's one journal path
(``RelayEvents.write``) never raises a journal's failure into what called it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from cellgate.gate.audit.journal import JournalError
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.session.events import RelayEvents, Tasks


async def forever() -> None:
    await asyncio.Event().wait()


async def fails(after: asyncio.Event) -> None:
    await after.wait()
    raise RuntimeError("the pump broke")


def test_a_failed_child_cancels_its_siblings_and_is_handed_to_the_owner_once() -> None:
    async def main() -> tuple[list[tuple[str, str]], list[bool], str | None]:
        failures: list[tuple[str, str]] = []
        handled = asyncio.Event()

        async def on_failure(task: str, exc: BaseException) -> None:
            failures.append((task, str(exc)))
            handled.set()

        tasks = Tasks(on_failure=on_failure)
        go = asyncio.Event()
        siblings = [tasks.spawn(forever(), kernel=True), tasks.spawn(forever())]
        tasks.spawn(fails(go), kernel=True)
        tasks.spawn(fails(go))  # fails in the same turn: logged, not handed over a second time
        go.set()
        async with asyncio.timeout(10):
            await handled.wait()
            await asyncio.gather(*siblings, return_exceptions=True)
        return failures, [s.cancelled() for s in siblings], tasks.failure

    failures, cancelled, failure = asyncio.run(main())
    assert failures == [("fails", "the pump broke")]
    assert cancelled == [True, True]
    assert failure == "the relay's task fails failed: RuntimeError: the pump broke"


def test_a_cancelled_child_is_no_failure() -> None:
    async def main() -> str | None:
        tasks = Tasks()
        tasks.spawn(forever(), kernel=True)
        await tasks.end_kernel()
        return tasks.failure

    assert asyncio.run(main()) is None


def test_a_broken_journal_is_reported_once_and_never_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder(tmp_path / "run.ipynb", {})
    events = RelayEvents(recorder)
    recorder.journal.broken = "the disk is full (simulated by the test)"
    try:
        with caplog.at_level(logging.ERROR, logger="cellgate.gate"):
            assert events.write(lambda: recorder.event("cell-timeout", msg_id="m")) is False
            events.life("cell-kill", msg_id="m")
        with pytest.raises(JournalError):  # the journal itself still refuses: the relay's path is what absorbs it
            recorder.event("cell-timeout", msg_id="m")
    finally:
        recorder.journal.broken = None
        recorder.close()
    assert [r.getMessage().count("the disk is full") for r in caplog.records] == [1]
