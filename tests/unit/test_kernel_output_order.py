"""A cell's last output reaches IOPub before anything the kernel queues after flushing it (its idle status).

The kernel skips flushes that have nothing to send (``skip_empty_flushes``). The
race it must not lose: ipykernel's IOPub thread has taken the printed text from
the buffer but not yet queued its message (it runs the output log's hook first)
when the cell's thread flushes and then queues the idle status. Here that moment
is held open by a hook that waits, and ipykernel's real OutStream and IOPub
thread send over a real ZeroMQ socket.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
from ipykernel.iostream import IOPubThread, OutStream
from jupyter_client.session import Session

from cellgate.kernel.kernel import skip_empty_flushes

WAIT = 30  # seconds; only a broken test waits this long


@pytest.fixture
def iopub() -> Iterator[tuple[IOPubThread, zmq.Socket[bytes]]]:
    context = zmq.Context()
    sender, receiver = context.socket(zmq.PUSH), context.socket(zmq.PULL)
    sender.bind("inproc://iopub")
    receiver.connect("inproc://iopub")
    thread = IOPubThread(sender)
    thread.start()
    yield thread, receiver
    thread.stop()
    thread.close()
    receiver.close(linger=0)
    context.term()


def on_io_thread(thread: IOPubThread, work: Any) -> None:
    done = threading.Event()
    thread.schedule(lambda: (work(), done.set()))
    assert done.wait(WAIT)


def test_the_last_output_is_sent_before_what_follows_its_flush(iopub) -> None:
    thread, receiver = iopub
    stream = OutStream(Session(key=b""), thread, "stdout", watchfd=False)
    skip_empty_flushes(stream)
    in_send, release = threading.Event(), threading.Event()

    def slow_hook(msg: Any) -> Any:  # like the output log's hook: runs after the text left the buffer
        in_send.set()
        release.wait(WAIT)
        return msg

    on_io_thread(thread, lambda: stream.register_hook(slow_hook))
    stream.write("the cell's last line\n")
    thread.schedule(stream._flush)  # the IOPub thread's own timed flush fires
    assert in_send.wait(WAIT)

    # The cell's thread flushes, then queues its status; the hook is released once it has queued something.
    cell_thread_queued = threading.Event()
    schedule = thread.schedule

    def watched_schedule(f: Any) -> None:
        if threading.current_thread() is cell:
            cell_thread_queued.set()
        schedule(f)

    thread.schedule = watched_schedule  # type: ignore[method-assign]
    cell = threading.Thread(target=lambda: (stream.flush(), thread.send_multipart([b"idle"])))
    cell.start()
    assert cell_thread_queued.wait(WAIT)
    release.set()
    cell.join(WAIT)

    first = receiver.recv_multipart()
    second = receiver.recv_multipart()
    assert b"the cell's last line" in b"".join(first), "the status went out before the cell's last output"
    assert second == [b"idle"]
