"""The sandbox's one way out: a proxy endpoint on the sandbox's own loopback, each connection carried as bytes
over the kernel's channel to the host gate.

The sandbox has no network device. Its HTTP clients find this endpoint through the usual proxy settings
(``HTTP_PROXY``, ``HTTPS_PROXY``, pip's, npm's, git's: the host sets them, ``sandbox.environment``). Nothing here
reads HTTP, decides or holds a key: the host is the proxy (it reads each request, refuses or allows it, terminates
TLS with the session's CA, whose private key never enters the sandbox). A client that ignores the settings finds no
route at all. Messages (``wire.NET_*``)::

    kernel -> host, comm_msg on IOPub, comm target NET_TARGET:
        {"op": "open", "conn": n}                a client connected
        {"op": "data", "conn": n} + one buffer   bytes from the client (at most NET_CHUNK_BYTES)
        {"op": "eof", "conn": n}                 the client shut its side, or is gone
        {"op": "ack", "conn": n, "bytes": k}     k more of the host's bytes were handed to the client
    host -> kernel, comm_msg on control, comm id NET_COMM:
        {"op": "setup", "ca": "<PEM>"}           the session's CA certificate, written to NET_CA_FILE
        {"op": "data", "conn": n} + one buffer
        {"op": "close", "conn": n}               after its data: the host is done with the connection

The host sends at most ``NET_WINDOW_BYTES`` a connection has not acknowledged, so a slow client holds the host's
download back instead of this process's memory. One thread serves every connection with a selector; the control
thread hands it the host's messages through a queue and a wakeup socket.
"""

from __future__ import annotations

import collections
import os
import selectors
import socket
import threading
from typing import Any

from .wire import NET_CA_FILE, NET_CHUNK_BYTES, NET_PROXY_PORT, NET_PROXY_URL, NET_TARGET

MAX_CONNECTIONS = 512  # at once: more are closed as they arrive (the host bounds its side too)
SETUP_WAIT = 5.0  # seconds the first cell waits for the host's CA, which the host sends as it connects


class _Conn:
    __slots__ = ("sock", "outgoing", "closing", "eof_sent", "events")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.outgoing: collections.deque[memoryview] = collections.deque()
        self.closing = False  # the host closed it: shut once what it sent is written
        self.eof_sent = False
        self.events = selectors.EVENT_READ  # what the selector watches it for (0: not registered)


class Tunnel:
    """The loopback endpoint and its pipe to the host."""

    def __init__(self, port: int = NET_PROXY_PORT) -> None:
        self.ready = threading.Event()  # the CA is in place
        self.active = False  # an endpoint is listening (only in a sandbox set up for it)
        self._comm: Any = None
        self._conns: dict[int, _Conn] = {}
        self._next = 0
        self._inbox: collections.deque[tuple[str, int, Any]] = collections.deque()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        if os.environ.get("HTTP_PROXY") != NET_PROXY_URL:  # not in a sandbox the host set up for it: no endpoint
            self.ready.set()
            return
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind(("127.0.0.1", port))
        except OSError:  # taken by the cell's own code (a restart in the same sandbox keeps no listener)
            self._listener.close()
            self.ready.set()
            return
        self._listener.listen(128)
        self.active = True
        self._listener.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        threading.Thread(target=self._serve, name="cellgate-tunnel", daemon=True).start()

    def forget_comm(self) -> None:
        """A new host serves this kernel (resumed or forked): its connections are gone with the old one."""
        self._comm = None
        self._post("reset", -1, None)

    def wait_ready(self) -> None:
        """Before a cell runs: the session's CA is in place (a client reads it before it connects)."""
        if not self.ready.is_set():
            self.ready.wait(SETUP_WAIT)

    # ------------------------------------------------------------ the control thread: the host's messages
    def handle(self, data: Any, buffers: list[Any]) -> None:
        if not isinstance(data, dict):
            return
        op, conn = data.get("op"), data.get("conn")
        if not self.active:
            return
        if op == "setup" and isinstance(data.get("ca"), str):
            self._write_ca(data["ca"])
        elif op in ("data", "close") and isinstance(conn, int):
            self._post(op, conn, memoryview(buffers[0]).cast("B") if op == "data" and buffers else None)

    def _write_ca(self, pem: str) -> None:
        folder = os.path.dirname(NET_CA_FILE)
        os.makedirs(folder, exist_ok=True)
        temp = f"{NET_CA_FILE}.{os.getpid()}.tmp"
        with open(temp, "w") as handle:
            handle.write(pem)
        os.replace(temp, NET_CA_FILE)
        self.ready.set()

    def _post(self, op: str, conn: int, payload: Any) -> None:
        self._inbox.append((op, conn, payload))
        try:
            self._wake_w.send(b"\0")
        except BlockingIOError:  # already woken
            pass

    # ------------------------------------------------------------ the tunnel's thread
    def _send(self, data: dict[str, Any], buffers: list[Any] | None = None) -> None:
        if self._comm is None or getattr(self._comm, "_closed", False):
            import comm

            self._comm = comm.create_comm(target_name=NET_TARGET, data={})
        self._comm.send(data, buffers=buffers)

    def _serve(self) -> None:
        while True:
            for key, events in self._selector.select():
                if key.fileobj is self._listener:
                    self._accept()
                elif key.fileobj is self._wake_r:
                    self._drain_inbox()
                else:
                    self._on_ready(key.data, events)

    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        if len(self._conns) >= MAX_CONNECTIONS:
            sock.close()
            return
        sock.setblocking(False)
        self._next += 1
        self._conns[self._next] = _Conn(sock)
        self._selector.register(sock, selectors.EVENT_READ, self._next)
        self._send({"op": "open", "conn": self._next})

    def _drain_inbox(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while self._inbox:
            op, number, payload = self._inbox.popleft()
            if op == "reset":
                for gone in list(self._conns):
                    self._drop(gone)
                continue
            conn = self._conns.get(number)
            if conn is None:
                continue
            if op == "data" and payload is not None:
                conn.outgoing.append(payload)
            elif op == "close":
                conn.closing = True
            self._flush(number, conn)

    def _on_ready(self, number: int, events: int) -> None:
        conn = self._conns.get(number)
        if conn is None:
            return
        if events & selectors.EVENT_WRITE:
            self._flush(number, conn)
        if events & selectors.EVENT_READ and number in self._conns:
            try:
                chunk = conn.sock.recv(NET_CHUNK_BYTES)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if chunk:
                self._send({"op": "data", "conn": number}, [chunk])
            elif not conn.eof_sent:
                conn.eof_sent = True
                self._send({"op": "eof", "conn": number})
                self._watch(number, conn)

    def _flush(self, number: int, conn: _Conn) -> None:
        """Writes what the host sent, as far as the client takes it, and tells the host how much went."""
        written = 0
        try:
            while conn.outgoing:
                view = conn.outgoing[0]
                sent = conn.sock.send(view)
                written += sent
                if sent < len(view):
                    conn.outgoing[0] = view[sent:]
                    break
                conn.outgoing.popleft()
        except BlockingIOError:
            pass
        except OSError:  # the client is gone: the host hears it as an end of its stream
            conn.outgoing.clear()
            if not conn.eof_sent:
                conn.eof_sent = True
                self._send({"op": "eof", "conn": number})
            self._drop(number)
            return
        if written:
            self._send({"op": "ack", "conn": number, "bytes": written})
        if conn.closing and not conn.outgoing:
            self._drop(number)
            return
        self._watch(number, conn)

    def _watch(self, number: int, conn: _Conn) -> None:
        """Selects what the connection waits for: the client's bytes until its end, room for the host's bytes."""
        events = (0 if conn.eof_sent else selectors.EVENT_READ) | (selectors.EVENT_WRITE if conn.outgoing else 0)
        if events == conn.events:
            return
        if conn.events and events:
            self._selector.modify(conn.sock, events, number)
        elif events:
            self._selector.register(conn.sock, events, number)
        else:
            self._selector.unregister(conn.sock)
        conn.events = events

    def _drop(self, number: int) -> None:
        conn = self._conns.pop(number, None)
        if conn is None:
            return
        if conn.events:
            self._selector.unregister(conn.sock)
        conn.sock.close()
