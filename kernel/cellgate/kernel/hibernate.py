"""Pausing a live kernel for a checkpoint, the kernel's side (``gate.session.live`` is the host's).

gVisor saves a sandbox only while nothing in it holds a connection to the
host, and the kernel's ZeroMQ sockets are bound in a host folder (runsc
``--host-uds=create``): a host-connected unix socket cannot be saved. So,
asked by the host, the kernel lets go of every socket, each on the thread
that owns it (ZeroMQ sockets are not thread-safe), stops its heartbeat,
closes its output log and says so with a file in its socket folder. The host
then checkpoints the sandbox. In a sandbox restored from that checkpoint (or
the same sandbox, left running after a fork's checkpoint) the host puts a
second file there: the kernel reads its connection file again (each sandbox
has its own key), binds the same endpoints and goes on where it was.

Runs on a thread of its own; the cell thread is idle (the host refuses to
pause while a cell runs or a call waits).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from . import snapshot, wire

UNBIND_WAIT = 5.0  # seconds for one socket's owner thread to let go of it


class Hibernation:
    """Lets go of a running ``IPKernelApp``'s sockets and takes them up again."""

    def __init__(self, app: Any, output_log: Any, after_resume: Callable[[], None]) -> None:
        self.app = app
        self.output_log = output_log
        self.after_resume = after_resume  # the kernel's own: its comms opened anew for the host serving it now
        self.folder = os.path.dirname(str(app.ip))  # the socket folder (ipc endpoints are ``<folder>/k-<port>``)
        self._lock = threading.Lock()
        self._wanted = False  # a pause was asked for and not begun
        self._running = False  # the pause thread runs

    def request(self) -> None:
        """The host asked (on the control thread): pause on a thread of its own. A request that arrives while a
        pause is still being taken back (the kernel bound control before it was done) pauses again after it."""
        with self._lock:
            self._wanted = True
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._serve, name="cellgate-pause", daemon=True).start()

    def _serve(self) -> None:
        while True:
            with self._lock:
                if not self._wanted:
                    self._running = False
                    return
                self._wanted = False
            try:
                self._pause_and_resume()
            except Exception:  # noqa: BLE001 - no pause marker: the host's wait for it fails and says so
                self.app.log.exception("cellgate: the kernel could not pause")

    def _pause_and_resume(self) -> None:
        endpoints = self._let_go()
        for name in (wire.RESUME_MARKER, wire.RESUMED_MARKER):  # a cell's leftovers are not the host's answer
            self._remove(name)
        try:
            self._mark(wire.PAUSED_MARKER)
        except OSError:
            self._take_up(endpoints, in_place=False)  # no checkpoint without the marker: serve on as before
            raise
        while not self._has_file(wire.RESUME_MARKER):
            time.sleep(0.005)  # the host checkpoints the sandbox during this wait
        in_place = self._read(wire.RESUME_MARKER) == wire.RESUME_IN_PLACE
        for name in (wire.PAUSED_MARKER, wire.RESUME_MARKER):  # gone before any socket is bound: never stale
            self._remove(name)
        snapshot.after_restore()
        self.after_resume()
        self._adopt_key()
        self._take_up(endpoints, in_place)

    # -- letting go
    def _sockets(self) -> list[tuple[str, Any, Callable[[Callable[[], None]], None]]]:
        app = self.app
        shell = _on_loop(app.shell_channel_thread.io_loop) if getattr(app, "shell_channel_thread", None) else _now
        return [
            ("shell", app.shell_socket, shell),
            ("control", app.control_socket, _on_loop(app.control_thread.io_loop)),
            ("iopub", app.iopub_thread.socket, _on_loop(app.iopub_thread.io_loop)),
            ("stdin", app.stdin_socket, _now),  # used only by a running cell's input(): idle now
        ]

    def _let_go(self) -> dict[str, str]:
        app = self.app
        endpoints = {name: sock.getsockopt(zmq.LAST_ENDPOINT).decode() for name, sock, _ in self._sockets()}
        debug = getattr(app, "debug_shell_socket", None)
        if debug is not None:  # the debugger's own connection to the shell socket
            _on_loop(app.control_thread.io_loop)(lambda: debug.disconnect(endpoints["shell"]))
        for name, sock, run in self._sockets():
            run(functools.partial(sock.unbind, endpoints[name]))
        heartbeat = app.heartbeat
        heartbeat.context.term()  # its thread closes its socket and ends
        heartbeat.join(UNBIND_WAIT)
        # The stdin socket has no loop polling it: its connections close when it handles its commands.
        for _ in range(200):
            app.stdin_socket.getsockopt(zmq.EVENTS)
            if not self._connected():
                break
            time.sleep(0.005)
        if self.output_log is not None:
            self.output_log.close()  # reopened by its next write, in whichever sandbox that is
        return endpoints

    def _connected(self) -> bool:
        """Whether a socket of this process still has a peer in the socket folder (then no checkpoint can save it)."""
        import socket

        for name in os.listdir("/proc/self/fd"):
            try:
                if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    continue
                probe = socket.socket(fileno=os.dup(int(name)))
            except (OSError, ValueError):
                continue
            try:
                if probe.family == socket.AF_UNIX and str(probe.getpeername()).startswith(self.folder):
                    return True
            except OSError:
                pass
            finally:
                probe.close()
        return False

    # -- taking up again
    def _adopt_key(self) -> None:
        """Each sandbox has its own key: the restored one's is in its connection file."""
        try:
            with open(self.app.abs_connection_file) as file:
                key = json.load(file).get("key")
        except (OSError, ValueError):
            return
        if isinstance(key, str):
            self.app.session.key = key.encode()

    def _take_up(self, endpoints: dict[str, str], in_place: bool) -> None:
        """Bind again; in place, say so: the host's relay then connects anew (its old connections may hang on the
        listeners let go of, which it cannot tell from live ones)."""
        from ipykernel.heartbeat import Heartbeat

        app = self.app
        heartbeat = Heartbeat(zmq.Context(), (app.transport, app.ip, app.hb_port))  # type: ignore[no-untyped-call]
        heartbeat.start()
        app.heartbeat = heartbeat
        for name, sock, run in reversed(self._sockets()):
            run(functools.partial(sock.bind, endpoints[name]))
        debug = getattr(app, "debug_shell_socket", None)
        if debug is not None:
            _on_loop(app.control_thread.io_loop)(lambda: debug.connect(endpoints["shell"]))
        if in_place:
            self._mark(wire.RESUMED_MARKER)

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    # A cell can put anything at these names (a link, a FIFO, a folder): markers are regular files, read without
    # following or blocking, written whole under another name and moved into place.
    def _has_file(self, name: str) -> bool:
        try:
            return stat.S_ISREG(os.lstat(self._path(name)).st_mode)
        except OSError:
            return False

    def _read(self, name: str) -> str:
        try:
            fd = os.open(self._path(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return ""
        try:
            return os.read(fd, 64).decode(errors="replace").strip() if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        finally:
            os.close(fd)

    def _remove(self, name: str) -> None:
        path = self._path(name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _mark(self, name: str) -> None:
        partial = self._path(f".{name}.partial")
        self._remove(f".{name}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as marker:
            marker.write(name + "\n")
        self._remove(name)  # os.replace cannot replace a folder
        os.replace(partial, self._path(name))


def _now(action: Callable[[], None]) -> None:
    action()


def _on_loop(loop: Any) -> Callable[[Callable[[], None]], None]:
    """Run an action on ``loop``'s thread and wait for it (bounded)."""

    def run(action: Callable[[], None]) -> None:
        done = threading.Event()
        failure: list[BaseException] = []

        def call() -> None:
            try:
                action()
            except BaseException as exc:  # noqa: BLE001 - raised on the waiting thread below
                failure.append(exc)
            finally:
                done.set()

        loop.add_callback(call)
        if not done.wait(UNBIND_WAIT):
            raise TimeoutError("a socket's thread did not answer")
        if failure:
            raise failure[0]

    return run
