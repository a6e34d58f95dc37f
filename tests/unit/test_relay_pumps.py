"""The relay's owner without a sandbox (``session.relay.relay.Relay``): its pumps between a frontend's and a kernel's
real zmq sockets (``tests/fake_kernel.py``), each side signing with its own key through jupyter_client's Session.
What a frontend sends reaches the kernel re-signed with the kernel's key and is recorded; a kernel's reply and
IOPub end the cell; a message with a bad signature is dropped and counted; heartbeats pass unparsed; a frontend's
shutdown_request and the kernel's end are told to whoever built the relay."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_kernel import Backend, Frontend, Kernel, iopub_connected, signer

from cellgate.gate._errors import SessionError
from cellgate.gate.audit.journal import Journal
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.calls.dispatch import Dispatcher
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.session.cells.queue import CellTimeouts
from cellgate.gate.session.relay.relay import Relay


@dataclass
class Wired:
    relay: Relay
    kernel: Kernel
    frontend: Frontend
    backend: Backend
    recorder: Recorder
    shutdowns: list[dict[str, Any]]
    ends: list[str]
    ended: threading.Event


class BuggyJournal(Journal):
    """A journal with a bug (not a disk error): it raises on the record of a cell holding ``bug``, which the relay
    writes on its shell pump."""

    def append(self, event: str, sync: bool = False, **data: Any) -> dict[str, Any]:
        if event == "cell-sent" and "bug" in str(data.get("source")):
            raise RuntimeError("a bug in the journal")
        return super().append(event, sync=sync, **data)


@pytest.fixture()
def wired(tmp_path: Path) -> Iterator[Wired]:
    folder = Path(tempfile.mkdtemp(prefix="cg-"))  # ipc paths must stay short (the socket path's limit)
    recorder = Recorder(tmp_path / "run.ipynb", {}, open_journal=BuggyJournal)
    kernel, frontend = Kernel(folder), Frontend(folder)
    backend = Backend(kernel)
    shutdowns: list[dict[str, Any]] = []
    ends: list[str] = []
    ended = threading.Event()

    def kernel_end(event: str) -> None:
        ends.append(event)
        ended.set()

    relay = Relay(frontend.info, Dispatcher(ToolRegistry([]), log=recorder), recorder, CellTimeouts(),
                  on_shutdown=shutdowns.append, on_kernel_end=kernel_end)
    relay.start()
    try:
        relay.attach(backend.handle())  # type: ignore[arg-type]  # duck-typed to what the relay calls
        frontend.connect()
        yield Wired(relay, kernel, frontend, backend, recorder, shutdowns, ends, ended)
    finally:
        relay.stop()
        backend.end()  # the kernel watch's thread, blocked in wait(), returns: else the process hangs at its exit
        recorder.close()
        kernel.close()
        frontend.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_cell_reaches_the_kernel_resigned_and_its_reply_and_output_end_its_record(wired: Wired) -> None:
    iopub_connected(wired.kernel, wired.frontend)
    sent = wired.frontend.send("shell", "execute_request", {"code": "print('hi')", "silent": False})
    msg_id = sent["header"]["msg_id"]
    result = wired.relay.result_future(msg_id)
    idents, request = wired.kernel.recv("shell")  # checked with the kernel's key: the relay re-signed it
    assert request["header"]["msg_id"] == msg_id and request["content"]["code"] == "print('hi')"
    wired.kernel.publish("stream", {"name": "stdout", "text": "hi\n"}, request)
    wired.kernel.publish("status", {"execution_state": "idle"}, request)
    wired.kernel.reply("shell", idents, "execute_reply", {"status": "ok", "execution_count": 1}, request)
    record = result.result(10)
    assert (record.status, record.execution_count) == ("ok", 1)
    assert [o["text"] for o in record.outputs] == ["hi\n"]
    _, reply = wired.frontend.recv("shell")  # checked with the frontends' key: rebuilt and signed for them
    assert reply["header"]["msg_type"] == "execute_reply" and reply["parent_header"]["msg_id"] == msg_id


def test_a_request_signed_with_another_key_is_dropped_and_counted(wired: Wired) -> None:
    forged = signer("not-the-frontends-key")
    wired.frontend.send("shell", "kernel_info_request", {}, session=forged)
    honest = wired.frontend.send("shell", "kernel_info_request", {})
    _, first = wired.kernel.recv("shell")  # the shell socket keeps order: the forged one never came
    assert first["header"]["msg_id"] == honest["header"]["msg_id"]
    # Reported where it was read (the cell tap) and where it was refused (the re-signing), never forwarded.
    assert wired.relay.protocol_counts() == {"protocol-error": 2}


def test_heartbeats_pass_as_they_are(wired: Wired) -> None:
    wired.frontend.sockets["hb"].send(b"ping-123")
    assert wired.kernel.sockets["hb"].poll(10_000)
    frames = wired.kernel.sockets["hb"].recv_multipart()  # the relay's identity, the frontend's, the beat
    assert frames[-1] == b"ping-123"
    wired.kernel.sockets["hb"].send_multipart(frames)  # echoed, as a kernel's heartbeat does
    assert wired.frontend.sockets["hb"].poll(10_000)
    assert wired.frontend.sockets["hb"].recv_multipart() == [b"ping-123"]


def test_a_shutdown_request_and_the_kernels_exit_are_told_to_the_relays_owner(wired: Wired) -> None:
    wired.frontend.send("control", "shutdown_request", {"restart": True})
    _, request = wired.kernel.recv("control")
    assert request["header"]["msg_type"] == "shutdown_request"
    assert wired.shutdowns == [{"restart": True}]
    wired.backend.end(0)  # the kernel exits, as asked
    assert wired.ended.wait(10)
    assert wired.ends == ["kernel-exited"]


def test_a_kernel_that_dies_is_told_as_a_death_and_ends_its_running_cell(wired: Wired) -> None:
    sent = wired.frontend.send("shell", "execute_request", {"code": "import os; os._exit(1)", "silent": False})
    result = wired.relay.result_future(sent["header"]["msg_id"])
    wired.kernel.recv("shell")
    wired.backend.end(1)
    assert wired.ended.wait(10)
    assert wired.ends == ["kernel-died"]
    record = result.result(10)
    assert record.status == "kernel-died" and "kernel-died" in record.limits_hit


def test_a_pump_that_dies_ends_the_session_with_a_recorded_reason_and_kills_the_kernel(wired: Wired) -> None:
    sent = wired.frontend.send("shell", "execute_request", {"code": "bug", "silent": False})
    result = wired.relay.result_future(sent["header"]["msg_id"])
    with pytest.raises(SessionError, match=r"_pump_to_kernel\(shell\) failed: RuntimeError: a bug in the journal"):
        result.result(10)  # before the task group: no answer, ever
    assert wired.backend.killed.wait(10)  # nothing runs that is not relayed
    later = wired.relay.result_future("asked-later")
    with pytest.raises(SessionError, match="the session's gate stopped"):
        later.result(0)  # refused at once
    events = [e for e in wired.recorder.journal.path.read_text().splitlines() if '"gate-error"' in e]
    assert len(events) == 1 and "_pump_to_kernel(shell)" in events[0] and "a bug in the journal" in events[0]
