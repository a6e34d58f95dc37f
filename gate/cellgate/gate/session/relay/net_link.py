"""The host's end of the kernel's tunnel (``cellgate.kernel.tunnel``): each sandbox connection as a stream the
network gate (``network.proxy``) serves.

The kernel's ``open``/``data``/``eof``/``ack`` messages arrive on IOPub on the comm it opened with
``wire.NET_TARGET``; each connection gets a local socket pair (no network stack: AF_UNIX) whose one end the proxy
reads and writes as a client, and whose other end this link pumps to and from the kernel. What the host sends a
connection waits for the kernel's acknowledgements beyond ``wire.NET_WINDOW_BYTES``; what a connection sends the
host beyond ``MAX_UNREAD_BYTES`` unread by the proxy ends it. Everything here is on the relay's loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any, Final

from cellgate.gate.calls.dispatch import CallScope
from cellgate.gate.network.proxy import NetworkGate
from cellgate.gate.session.cells.queue import CellQueue
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.kernel.watch import KernelWatch
from cellgate.kernel.wire import NET_COMM, NET_WINDOW_BYTES

MAX_CONNECTIONS: Final = 512  # the kernel's own bound; a connection past it is closed as it opens
MAX_UNREAD_BYTES: Final = 64 << 20  # bytes from the sandbox the proxy has not read yet, per connection
# Bytes in one message to the kernel, and unacknowledged per connection: each control message costs the sandbox
# a few thread hand-offs (milliseconds inside gVisor), so a download travels in few, large ones.
HOST_CHUNK_BYTES: Final = 2 << 20
WINDOW_BYTES: Final = max(NET_WINDOW_BYTES, 8 * HOST_CHUNK_BYTES)


class _Connection:
    def __init__(self, number: int) -> None:
        self.number = number
        self.writer: asyncio.StreamWriter | None = None  # the link's end: the sandbox's bytes go in here
        self.unacked = 0
        self.window = asyncio.Event()
        self.window.set()
        self.ready = asyncio.Event()


class NetLink:
    def __init__(self, ctx: SessionContext, network: NetworkGate, cells: CellQueue, kernel: KernelWatch,
                 scope: Callable[[], tuple[CallScope, Callable[[Any], None]] | None]) -> None:
        self.network, self.cells, self.kernel = network, cells, kernel
        self.events, self.tasks = ctx.events, ctx.tasks
        self._scope = scope
        self.comms: set[str] = set()
        self._conns: dict[int, _Connection] = {}

    def attached(self) -> None:
        """A kernel is connected: it gets the session's CA (its clients trust it) before its first cell."""
        self._conns.clear()
        self.comms.clear()
        self.tasks.spawn(self._send({"op": "setup", "ca": self.network.ca.cert_pem.decode()}), kernel=True)

    def opened(self, comm_id: str) -> None:
        if len(self.comms) < 4:
            self.comms.add(comm_id)

    def on_message(self, data: Any, buffers: list[Any]) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("conn"), int):
            return
        op, number = data.get("op"), data["conn"]
        conn = self._conns.get(number)
        if op == "open" and conn is None and len(self._conns) < MAX_CONNECTIONS and 0 < number < 1 << 62:
            conn = self._conns[number] = _Connection(number)
            self.tasks.spawn(self._serve(conn), kernel=True, name="NetLink._serve")
        elif conn is None:
            return
        elif op == "data" and len(buffers) == 1:
            self.tasks.spawn(self._to_proxy(conn, bytes(buffers[0])), kernel=True)
        elif op == "eof":
            self.tasks.spawn(self._eof(conn), kernel=True)
        elif op == "ack" and isinstance(data.get("bytes"), int) and data["bytes"] > 0:
            conn.unacked = max(0, conn.unacked - data["bytes"])
            if conn.unacked < WINDOW_BYTES:
                conn.window.set()

    async def _to_proxy(self, conn: _Connection, chunk: bytes) -> None:
        await conn.ready.wait()
        writer = conn.writer
        if writer is None or writer.is_closing():
            return
        if writer.transport.get_write_buffer_size() + len(chunk) > MAX_UNREAD_BYTES:
            writer.transport.abort()
            return
        writer.write(chunk)

    async def _eof(self, conn: _Connection) -> None:
        await conn.ready.wait()
        if conn.writer is not None and conn.writer.can_write_eof() and not conn.writer.is_closing():
            conn.writer.write_eof()

    async def _serve(self, conn: _Connection) -> None:
        """Runs the proxy on one end of a socket pair and pumps the other end back to the kernel."""
        proxy_end, link_end = socket.socketpair()
        loop = asyncio.get_running_loop()
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = loop.create_future()
        reader = asyncio.StreamReader(limit=1 << 20)
        # Built as a server's accepted connection: the proxy's start_tls is then the server's side.
        protocol = asyncio.StreamReaderProtocol(reader, lambda r, w: accepted.set_result((r, w)))
        await loop.connect_accepted_socket(lambda: protocol, proxy_end)
        link_reader, conn.writer = await asyncio.open_connection(sock=link_end, limit=HOST_CHUNK_BYTES)
        conn.ready.set()
        proxy = self.tasks.spawn(self._proxy(*await accepted), kernel=True, name="NetworkGate.serve")
        try:
            while chunk := await link_reader.read(HOST_CHUNK_BYTES):
                await conn.window.wait()
                conn.unacked += len(chunk)
                if conn.unacked >= WINDOW_BYTES:
                    conn.window.clear()
                await self._send({"op": "data", "conn": conn.number}, [chunk])
        except (ConnectionError, OSError):
            pass
        finally:
            await self._send({"op": "close", "conn": conn.number})
            conn.writer.close()
            proxy.cancel()
            self._conns.pop(conn.number, None)

    async def _proxy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The network gate on one connection: a bug in it ends that connection, recorded, never the session."""
        try:
            await self.network.serve(reader, writer, self._scope)
        except Exception as exc:  # noqa: BLE001
            self.events.protocol("network-error", error=f"{type(exc).__name__}: {exc}"[:500])
            writer.close()

    async def _send(self, data: dict[str, Any], buffers: list[bytes] | None = None) -> None:
        await self.kernel.send_control("comm_msg", {"comm_id": NET_COMM, "data": data}, buffers or [])
