"""The kernel's owner without a sandbox (``session.kernel``): ``KernelWatch`` signs its own control messages with the
sandbox's key, and tells its listener (the cells, through the relay) how the kernel ended: a death after its lost
output was recovered, a kill by the host, an exit that was asked for, a frame over the size bound; ``overflow``
sees a frame refused by ``ZMQ_MAXMSGSIZE`` (libzmq drops its connection). Real zmq sockets, real jupyter_client
signing, the real recorder (``tests/fake_kernel.py`` for the kernel's side)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from fake_kernel import Backend, Kernel, url

from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.kernel.overflow import OVERFLOW_EVENTS, monitor_socket, watch_overflow
from cellgate.gate.session.kernel.watch import KernelEnd, KernelWatch


class Listener:
    """What the keeper told the cells, in order."""

    def __init__(self, running: bool = True) -> None:
        self.running = running
        self.told: list[tuple[str, Any]] = []
        self.gone = asyncio.Event()
        self.ended = asyncio.Event()

    def any_running(self) -> bool:
        return self.running

    def recover_output(self, lost: Callable[[str], Iterable[dict[str, Any]]]) -> None:
        self.told.append(("recover", list(lost("cell-1"))))

    def mark(self, end: KernelEnd) -> None:
        self.told.append(("mark", end))

    def kernel_ended(self, end: KernelEnd) -> None:
        self.told.append(("ended", end))
        self.ended.set()

    def kernel_gone(self, event: str) -> None:
        self.told.append(("gone", event))
        self.gone.set()


@pytest.fixture()
def folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cg-"))  # ipc paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def recorder(tmp_path: Path) -> Iterator[Recorder]:
    recorder = Recorder(tmp_path / "run.ipynb", {})
    yield recorder
    recorder.close()


def journal(recorder: Recorder) -> list[dict[str, Any]]:
    return [json.loads(line) for line in recorder.journal.path.read_text().splitlines()]


def run(recorder: Recorder, folder: Path, listener: Listener,
        scenario: Callable[[KernelWatch, Backend, Kernel], Coroutine[Any, Any, None]]) -> None:
    kernel = Kernel(folder)
    backend = Backend(kernel)

    async def main() -> None:
        ctx = SessionContext.create(recorder)
        watch = KernelWatch(ctx, listener)
        context = zmq.asyncio.Context()
        control = context.socket(zmq.DEALER)
        control.linger = 0
        control.connect(url(kernel.info, "control"))
        try:
            watch.attached(backend.handle(), control, None)  # type: ignore[arg-type]  # duck-typed backend
            async with asyncio.timeout(10):
                await scenario(watch, backend, kernel)
        finally:
            backend.end()  # the process watch's thread returns
            await ctx.tasks.end_kernel()
            await ctx.tasks.end_session()
            context.destroy(linger=0)

    try:
        asyncio.run(main())
    finally:
        kernel.close()


def test_the_keepers_control_messages_are_signed_with_the_sandboxs_key(recorder: Recorder, folder: Path) -> None:
    got: list[dict[str, Any]] = []

    async def scenario(watch: KernelWatch, backend: Backend, kernel: Kernel) -> None:
        await watch.interrupt()
        _, msg = await asyncio.to_thread(kernel.recv, "control")  # checked with the kernel's own key
        got.append(msg)

    run(recorder, folder, Listener(), scenario)
    assert got[0]["header"]["msg_type"] == "interrupt_request"


def test_a_death_recovers_the_lost_output_first_then_ends_the_cells_as_kernel_died(
        recorder: Recorder, folder: Path) -> None:
    listener = Listener()

    async def scenario(watch: KernelWatch, backend: Backend, kernel: Kernel) -> None:
        backend.end(1)
        await listener.ended.wait()

    run(recorder, folder, listener, scenario)
    assert listener.told == [("recover", []), ("gone", "kernel-died"),
                             ("ended", KernelEnd("kernel-died", "kernel-died"))]
    assert [e["exit_code"] for e in journal(recorder) if e["event"] == "kernel-died"] == [1]


def test_an_exit_the_frontend_asked_for_is_no_death(recorder: Recorder, folder: Path) -> None:
    listener = Listener()

    async def scenario(watch: KernelWatch, backend: Backend, kernel: Kernel) -> None:
        watch.exit_expected = True
        backend.end(0)
        await listener.gone.wait()

    run(recorder, folder, listener, scenario)
    assert listener.told == [("gone", "kernel-exited")]  # no cell is ended for it
    assert "kernel-died" not in [e["event"] for e in journal(recorder)]


def test_the_hosts_kill_ends_the_cells_as_killed(recorder: Recorder, folder: Path) -> None:
    listener = Listener()

    async def scenario(watch: KernelWatch, backend: Backend, kernel: Kernel) -> None:
        assert watch.kill_soon()
        await listener.ended.wait()

    run(recorder, folder, listener, scenario)
    # the whole story in order: the lost output recovered first (none here), then gone, then the cells ended
    assert listener.told == [("recover", []), ("gone", "kernel-killed"), ("ended", KernelEnd("killed", "killed-by-host"))]


def test_a_frame_over_the_bound_marks_the_running_cells_and_stops_the_kernel(recorder: Recorder, folder: Path) -> None:
    listener = Listener(running=True)

    async def scenario(watch: KernelWatch, backend: Backend, kernel: Kernel) -> None:
        assert watch.control is not None
        watch.overflow("iopub", watch.control, url(kernel.info, "control"), watch.sandbox)  # type: ignore[arg-type]
        await listener.ended.wait()

    run(recorder, folder, listener, scenario)
    (mark,) = [end for what, end in listener.told if what == "mark"]
    assert (mark.status, mark.reason, mark.error["ename"]) == ("error", "message-size", "MessageTooLarge")
    assert listener.told[-1] == ("ended", KernelEnd("error", "message-size"))
    assert [e["channel"] for e in journal(recorder) if e["event"] == "message-too-large"] == ["iopub"]


def test_a_restart_of_a_kernel_that_had_not_died_is_journalled(recorder: Recorder, folder: Path) -> None:
    async def scenario(watch: KernelWatch, backend: Backend, kernel: Kernel) -> None:
        watch.detached("restart")

    run(recorder, folder, Listener(), scenario)
    assert [e["reason"] for e in journal(recorder) if e["event"] == "kernel-restarted"] == ["frontend"]


def test_a_frame_over_maxmsgsize_is_seen_as_an_overflow(folder: Path) -> None:
    async def main() -> int:
        context = zmq.asyncio.Context()
        address = f"ipc://{folder}/overflow"
        peer = context.socket(zmq.ROUTER)
        peer.linger = 0
        peer.bind(address)
        reader = context.socket(zmq.DEALER)
        reader.linger = 0
        reader.setsockopt(zmq.MAXMSGSIZE, 1000)
        reader.identity = b"reader"
        monitor = monitor_socket(reader, OVERFLOW_EVENTS)
        reader.connect(address)
        overflows = asyncio.Event()
        count = 0

        def seen() -> None:
            nonlocal count
            count += 1
            overflows.set()

        watching = asyncio.ensure_future(watch_overflow(monitor, seen))
        try:
            async with asyncio.timeout(10):
                await reader.send(b"hello")  # the peer learns the reader's identity from it
                await peer.recv_multipart()
                await peer.send_multipart([b"reader", b"x" * 2000])  # over the reader's bound
                await overflows.wait()
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            reader.disable_monitor()
            context.destroy(linger=0)
        return count

    assert asyncio.run(main()) == 1
