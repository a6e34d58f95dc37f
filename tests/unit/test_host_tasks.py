"""No task of the host is left to fail unseen: a sandbox whose launch was given up is deleted by a task the
provisioner owns and awaits (its failure raised), and the printer of waiting notices that failed is said when
its block ends (``ops.waiting.printing``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from cellgate.gate._errors import SessionError
from cellgate.gate.ops.waiting import printing
from cellgate.gate.session.provisioner import GVisorProvisioner


class SlowBackend:
    """A backend whose start returns only when the test lets it; delete notes what it deleted (or fails)."""

    def __init__(self, delete_fails: bool = False) -> None:
        self.go = threading.Event()
        self.started = threading.Event()
        self.deleted: list[str] = []
        self.delete_fails = delete_fails

    def start(self, request: Any) -> str:
        self.started.set()
        assert self.go.wait(10)
        return "handle-1"

    def delete(self, handle: str) -> None:
        if self.delete_fails:
            raise OSError("the sandbox's folder is busy")
        self.deleted.append(handle)


async def give_up_a_launch(provisioner: GVisorProvisioner, backend: SlowBackend) -> None:
    launch = asyncio.ensure_future(provisioner._start_sandbox(backend, None))  # type: ignore[arg-type]
    await asyncio.to_thread(backend.started.wait, 10)
    launch.cancel()  # the KernelManager gave up (a start timeout, a shutdown)
    with pytest.raises(asyncio.CancelledError):
        await launch
    backend.go.set()  # the sandbox starts after all


def test_a_sandbox_started_after_its_launch_was_given_up_is_deleted_by_an_owned_task() -> None:
    backend = SlowBackend()

    async def main() -> None:
        provisioner = GVisorProvisioner(kernel_id="k", kernel_spec=None)
        await give_up_a_launch(provisioner, backend)
        async with asyncio.timeout(10):
            await provisioner._settle_abandoned()  # what cleanup awaits

    asyncio.run(main())
    assert backend.deleted == ["handle-1"]


def test_a_deletion_that_fails_is_raised_not_dropped() -> None:
    backend = SlowBackend(delete_fails=True)

    async def main() -> None:
        provisioner = GVisorProvisioner(kernel_id="k", kernel_spec=None)
        await give_up_a_launch(provisioner, backend)
        async with asyncio.timeout(10):
            await provisioner._settle_abandoned()

    with pytest.raises(SessionError, match="could not be deleted: OSError: the sandbox's folder is busy"):
        asyncio.run(main())


class BrokenClient:
    """An IOPub client whose channel fails (as a closed socket does)."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def get_iopub_msg(self) -> dict[str, Any]:
        self.asked.set()
        raise RuntimeError("the iopub channel closed")


def test_a_notice_printer_that_failed_is_said_when_its_block_ends(capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> None:
        client = BrokenClient()
        async with printing(client):
            await asyncio.wait_for(client.asked.wait(), 10)

    asyncio.run(main())
    assert ("cellgate: the notices of calls waiting for approval stopped: RuntimeError: the iopub channel closed"
            in capsys.readouterr().err)
