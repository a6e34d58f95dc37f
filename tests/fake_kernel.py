"""The far sides of a relay without a sandbox: a kernel's and a frontend's Jupyter sockets, on real zmq over ipc,
each signing with its own key through jupyter_client's ``Session`` (what the session's owners are tested against:
``tests/unit/test_relay_*.py``, ``test_kernel_owner.py``).

``Backend`` answers for the stand-in kernel as a sandbox backend would (its process "ends" when the test says so,
or when the host kills it); it is duck-typed to the calls the relay and the kernel's owner make.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.session import Session

from cellgate.gate.sandbox.backend import SandboxStatus
from cellgate.gate.sandbox.cpuclock import CpuSource

CHANNELS = ("shell", "control", "stdin", "hb", "iopub")
WAIT_MS = 10_000  # the bound on any one message the test waits for


def connection(folder: Path, name: str, key: str) -> dict[str, Any]:
    """Connection info on ipc in ``folder`` (``name-<port>`` files): the endpoints are what ``endpoint`` makes."""
    info: dict[str, Any] = {"transport": "ipc", "ip": str(folder / name), "key": key,
                            "signature_scheme": "hmac-sha256"}
    for number, channel in enumerate(CHANNELS, start=1):
        info[f"{channel}_port"] = number
    return info


def url(info: dict[str, Any], channel: str) -> str:
    return f"ipc://{info['ip']}-{info[f'{channel}_port']}"


def signer(key: str) -> Session:
    return Session(key=key.encode(), signature_scheme="hmac-sha256", check_pid=False)


def recv(sock: zmq.Socket[bytes], session: Session) -> tuple[list[bytes], dict[str, Any]]:
    """The next message on ``sock`` (identities, message), its signature checked with ``session``'s key."""
    assert sock.poll(WAIT_MS), f"no message within {WAIT_MS} ms"
    idents, rest = session.feed_identities(sock.recv_multipart())
    return list(idents), session.deserialize(rest)


class Kernel:
    """A kernel's sockets (ROUTER shell/control/stdin/hb, PUB iopub), bound where the relay connects."""

    def __init__(self, folder: Path) -> None:
        self.key = os.urandom(16).hex()
        self.info = connection(folder, "kernel", self.key)
        self.session = signer(self.key)
        self.context = zmq.Context()
        self.sockets: dict[str, zmq.Socket[bytes]] = {}
        for channel in CHANNELS:
            sock = self.context.socket(zmq.PUB if channel == "iopub" else zmq.ROUTER)
            sock.linger = 0
            sock.bind(url(self.info, channel))
            self.sockets[channel] = sock

    def recv(self, channel: str) -> tuple[list[bytes], dict[str, Any]]:
        return recv(self.sockets[channel], self.session)

    def reply(self, channel: str, idents: list[bytes], msg_type: str, content: dict[str, Any],
              parent: dict[str, Any]) -> None:
        self.session.send(self.sockets[channel], msg_type, content, parent=parent["header"], ident=idents)

    def publish(self, msg_type: str, content: dict[str, Any], parent: dict[str, Any] | None = None) -> None:
        self.session.send(self.sockets["iopub"], msg_type, content, parent=parent["header"] if parent else None)

    def close(self) -> None:
        self.context.destroy(linger=0)


class Frontend:
    """A frontend's sockets (DEALER shell/control/stdin/hb, SUB iopub), connected to the relay's."""

    def __init__(self, folder: Path) -> None:
        self.key = os.urandom(16).hex()
        self.info = connection(folder, "front", self.key)
        self.session = signer(self.key)
        self.context = zmq.Context()
        self.sockets: dict[str, zmq.Socket[bytes]] = {}
        for channel in CHANNELS:
            sock = self.context.socket(zmq.SUB if channel == "iopub" else zmq.DEALER)
            sock.linger = 0
            if channel == "iopub":
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            self.sockets[channel] = sock

    def connect(self) -> None:
        for channel, sock in self.sockets.items():
            sock.connect(url(self.info, channel))

    def send(self, channel: str, msg_type: str, content: dict[str, Any],
             session: Session | None = None) -> dict[str, Any]:
        msg = (session or self.session).msg(msg_type, content)
        (session or self.session).send(self.sockets[channel], msg)
        return msg

    def recv(self, channel: str) -> tuple[list[bytes], dict[str, Any]]:
        return recv(self.sockets[channel], self.session)

    def close(self) -> None:
        self.context.destroy(linger=0)


def iopub_connected(kernel: Kernel, frontend: Frontend) -> None:
    """Wait until IOPub flows from the kernel through the relay to the frontend (a SUB's subscription takes a moment
    to reach its publisher, twice here): the kernel says its status until the frontend hears it, within a bound."""
    for _ in range(100):
        kernel.publish("status", {"execution_state": "idle"})
        if frontend.sockets["iopub"].poll(100):
            while frontend.sockets["iopub"].poll(100):  # the ones sent meanwhile
                frontend.sockets["iopub"].recv_multipart()
            return
    raise AssertionError("IOPub never reached the frontend through the relay")


class Handle:
    """A started sandbox as the relay and the kernel's owner see it."""

    id = "fake-sandbox"
    memory_limit_bytes = 512 << 20
    process = None

    def __init__(self, backend: Backend, key: str) -> None:
        self.backend = backend
        self.key = key


class Backend:
    """Answers for the stand-in kernel: it "ends" when the test calls ``end`` or the host kills it."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.ended = threading.Event()
        self.killed = threading.Event()
        self.exit_code = 0

    def handle(self) -> Handle:
        return Handle(self, self.kernel.key)

    def end(self, exit_code: int = 0) -> None:
        self.exit_code = exit_code
        self.ended.set()

    def connection_info(self, handle: Handle) -> dict[str, Any]:
        return dict(self.kernel.info)

    def watch_memory(self, handle: Handle, on_hit: Any) -> None:
        return None  # no memory accounting: an OOM kill would be a death

    def output_log(self, handle: Handle) -> None:
        return None

    def describe(self, handle: Handle) -> dict[str, Any]:
        return {"backend": "fake", "id": handle.id}

    def cpu_source(self, handle: Handle) -> CpuSource:
        return CpuSource(None, None)

    def wait(self, handle: Handle) -> SandboxStatus:
        self.ended.wait()
        return SandboxStatus("exited", self.exit_code)

    def kill(self, handle: Handle) -> None:
        self.killed.set()
        self.end(-9)
