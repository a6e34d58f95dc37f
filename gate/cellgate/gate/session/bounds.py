"""The host's own bounds against a hostile kernel: message sizes and refused calls.

``HostBounds`` holds the configured limits (``[sandbox] max_message_mb`` and
``max_refusals_per_cell``). ``RefusalLedger`` keeps one cell's refused calls
within its budget: identical refusals are recorded once and counted, the
budget counts every refusal, and past it nothing more is recorded but a
summary (count, first and last tool) when the cell ends. ``json_values``
counts what a message would cost to parse before the host parses it.
``watch_overflow`` tells a frame refused by ``ZMQ_MAXMSGSIZE`` from a kernel
that went away. ``precheck`` bounds an IOPub message before anything of it is
parsed but its header.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any, Literal

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from cellgate.gate._json import canonical_json
from cellgate.gate.calls.protocol import ProtocolError, strict_loads
from cellgate.gate.calls.record import CallRecord
from cellgate.kernel.wire import FILE_CHUNK_BYTES, MAX_REQUEST_BYTES

# Largest content the host parses of a message that is not an output (status, replies, input requests).
MAX_PARSED_CONTENT = 1 << 20
MAX_HEADER_BYTES = 16 << 10
MAX_METADATA_BYTES = 64 << 10
OUTPUT_TYPES = frozenset({"stream", "display_data", "execute_result", "error"})
IOPUB_TYPES = frozenset({
    "status", "stream", "display_data", "update_display_data", "execute_input", "execute_result", "error",
    "clear_output", "comm_open", "comm_msg", "comm_close", "debug_event", "iopub_welcome", "shutdown_reply",
})
COMM_TYPES = frozenset({"comm_open", "comm_msg", "comm_close"})

# Error kinds of a call the gate refused before any tool ran.
REFUSED_KINDS = frozenset({"not_found", "invalid", "denied", "budget", "rate_limited"})
# A refused call's arguments are recorded up to this size; beyond it only their size and digest.
REFUSED_ARGS_BYTES = 2048


# JSON values one output may hold: parsed, each costs the host ~50-100 bytes whatever its text
# size ("[]," is 3 bytes of text and a 56-byte list), so a message's cost is bounded by this,
# not only by its size. A plot of tens of thousands of points fits; past it the output is
# counted as dropped, never parsed. Counting them costs at most ~0.5 s of host CPU per message.
MAX_OUTPUT_VALUES = 100_000


def json_values(body: bytes, cap: int = MAX_OUTPUT_VALUES) -> int:
    """How many JSON values ``body`` holds, counted without building them; stops once past ``cap``.

    Commas, brackets and braces outside strings, plus the strings: each string is skipped by
    the json module's C scanner, so the Python work is one step per string, at most ``cap``.
    """
    if body.count(b",") + body.count(b"[") + body.count(b"{") + body.count(b'"') // 2 <= cap:
        return 0  # cannot be over (strings' contents included): no scan
    text = body.decode("utf-8", "replace")
    count = pos = 0
    while count <= cap:
        quote = text.find('"', pos)
        end = len(text) if quote < 0 else quote
        count += text.count(",", pos, end) + text.count("[", pos, end) + text.count("{", pos, end)
        if quote < 0:
            break
        try:
            pos = scanstring(text, quote + 1)[1]
        except ValueError:
            break  # not valid JSON: the parser rejects it
        count += 1
    return count


@dataclass(frozen=True)
class HostBounds:
    max_message_bytes: int = 64 << 20
    max_refusals_per_cell: int = 100


def is_refusal(record: CallRecord) -> bool:
    return not record.ok and (record.error or {}).get("kind") in REFUSED_KINDS and record.decision != "approved"


@dataclass
class RefusalLedger:
    """One cell's refused calls: counted against its budget, coalesced, summarised past it."""

    budget: int
    count: int = 0
    dropped: int = 0
    first_dropped: str | None = None
    last_dropped: str | None = None
    # (tool, kind, message, args digest) -> [seq of the recorded refusal, repeats not recorded]
    seen: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)

    @property
    def exhausted(self) -> bool:
        return self.count >= self.budget

    def note(self, tool: str, record: CallRecord | None = None) -> Literal["record", "coalesced", "dropped"]:
        """Count one refusal; says whether to record it, fold it into an identical one, or drop it."""
        self.count += 1
        if self.count > self.budget:
            self.dropped += 1
            self.first_dropped = self.first_dropped or tool
            self.last_dropped = tool
            return "dropped"
        if record is None:
            return "record"  # journalled elsewhere (a malformed request)
        error = record.error or {}
        key = (record.tool, str(error.get("kind")), str(error.get("message")), record.args_sha256)
        if key in self.seen:
            self.seen[key][1] += 1
            return "coalesced"
        self.seen[key] = [record.seq, 0]
        shrink_args(record)
        return "record"

    def outcome(self, record: CallRecord) -> Literal["record", "coalesced", "dropped"]:
        """Whether to record a served call: a refusal is counted (``note``), anything else recorded."""
        return self.note(record.tool, record) if is_refusal(record) else "record"

    def summary(self) -> list[tuple[str, dict[str, Any]]]:
        """The journal events that close the cell's account of its refusals."""
        events: list[tuple[str, dict[str, Any]]] = [
            ("refusals-coalesced", {"call_seq": seq, "tool": key[0], "repeated": repeats})
            for key, (seq, repeats) in self.seen.items() if repeats]
        if self.dropped:
            events.append(("refusals-dropped", {"count": self.dropped, "first_tool": self.first_dropped,
                                                "last_tool": self.last_dropped, "budget": self.budget}))
        return events


def shrink_args(record: CallRecord) -> None:
    """A refused call's large arguments are kept as their size (the digest is in args_sha256)."""
    size = len(canonical_json(record.args).encode())
    if size > REFUSED_ARGS_BYTES:
        record.args = {"(not recorded)": f"{size} bytes of arguments of a refused call; see args_sha256"}


OVERFLOW_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED


def monitor_socket(sock: zmq.asyncio.Socket, events: int) -> zmq.asyncio.Socket:
    """A PAIR socket receiving ``sock``'s monitor events, over a pipe without a high-water mark.

    libzmq sends monitor events with a blocking send from its I/O thread while holding the
    socket's monitor lock: with pyzmq's default pipe (``get_monitor_socket``), a full pipe (a
    reconnecting socket's events nobody read) stops the context's I/O thread and makes
    ``disable_monitor`` and close wait for ever. The events are few and read as they come.
    """
    address = f"inproc://cellgate-monitor-{os.urandom(8).hex()}"
    sock.monitor(address, events)
    monitor: zmq.asyncio.Socket = sock.context.socket(zmq.PAIR)
    monitor.setsockopt(zmq.RCVHWM, 0)  # an inproc pipe is unbounded when either side's HWM is 0
    monitor.connect(address)
    return monitor


async def watch_overflow(monitor: zmq.asyncio.Socket, on_overflow: Callable[[], None]) -> None:
    """Call ``on_overflow`` each time the monitored socket's peer sent a frame over its size bound.

    ``monitor`` watches ``OVERFLOW_EVENTS``. libzmq ends the connection of a peer that sends a
    frame over ZMQ_MAXMSGSIZE as a protocol error, and then never reconnects; a connection
    error (the kernel went away) is followed at once by a retry.
    """
    while True:
        event = parse_monitor_message(await monitor.recv_multipart())
        if event["event"] != zmq.EVENT_DISCONNECTED:
            continue
        # A poll, not asyncio.wait_for: on Python 3.11 wait_for swallows a cancellation that
        # arrives as its inner future completes (CPython gh-86296), and this loop then outlived
        # the kernel it watched, hanging the relay's detach at a session's end.
        if await monitor.poll(1000):
            continue  # libzmq is retrying: not an overflow (the loop reads its event)
        on_overflow()


def reopen(sock: zmq.Socket[Any], endpoint: str) -> None:
    """Connect again after an overflow (libzmq does not, after a protocol error)."""
    try:
        sock.disconnect(endpoint)
    except zmq.ZMQError:
        pass
    sock.connect(endpoint)


def read_unparsed(session: Any, frames: list[bytes], header_cap: int, metadata_cap: int) -> tuple[list[bytes], Any]:
    """(identities, message) with the signature checked and headers parsed within their caps; the
    content is left as bytes for ``content_within``. Raises on anything malformed."""
    idents, rest = session.feed_identities(frames)
    if len(rest) < 5:
        raise ProtocolError(f"{len(rest)} frames after the delimiter")
    if len(rest[1]) > header_cap or len(rest[2]) > header_cap or len(rest[3]) > metadata_cap:
        raise ProtocolError(f"oversize header/parent/metadata ({len(rest[1])}/{len(rest[2])}/{len(rest[3])} bytes)")
    return idents, session.deserialize(rest, content=False)


def content_within(msg: Any, cap: int) -> dict[str, Any] | None:
    """Parse a message's content if it is at most ``cap`` bytes (else None): the host never parses more."""
    body = msg["content"]
    if len(body) > cap:
        return None
    content = strict_loads(body)
    return content if isinstance(content, dict) else {}


def precheck(rest: list[bytes], report: Callable[..., None]) -> str | None:
    """An IOPub message's type, read from its bounded header before anything else is parsed; None to drop it
    (``report`` journals why, as ``report(kind, **data)``)."""
    if len(rest) < 5:
        report("protocol-error", channel="iopub", error=f"{len(rest)} frames after the delimiter")
        return None
    if len(rest[1]) > MAX_HEADER_BYTES or len(rest[2]) > MAX_HEADER_BYTES or len(rest[3]) > MAX_METADATA_BYTES:
        report("protocol-error", channel="iopub",
               error=f"oversize header/parent/metadata ({len(rest[1])}/{len(rest[2])}/{len(rest[3])} bytes)")
        return None
    header = strict_loads(rest[1])
    msg_type = header.get("msg_type") if isinstance(header, dict) else None
    if msg_type not in IOPUB_TYPES:
        report("protocol-error", channel="iopub", error=f"unknown msg_type {str(msg_type)[:80]!r}")
        return None
    # One buffer of file bytes at most, on a comm_msg (the files comm's; the taps refuse it on any other).
    buffers_ok = len(rest) == 5 or (msg_type == "comm_msg" and len(rest) == 6 and len(rest[5]) <= FILE_CHUNK_BYTES)
    if msg_type in COMM_TYPES and (len(rest[4]) > MAX_REQUEST_BYTES or not buffers_ok):
        report("call-rejected", reason=f"comm message of {len(rest[4])} bytes with "
               f"{len(rest) - 5} buffers (limit {MAX_REQUEST_BYTES} bytes, one buffer of file bytes at most)")
        return None
    return str(msg_type)
