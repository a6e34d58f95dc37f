"""Reading a kernel's messages within the host's bounds, before and while they are parsed.

``precheck`` bounds an IOPub message before anything of it is parsed but its
header; ``read_unparsed`` checks a message's signature and parses its headers
within their caps, leaving its content as bytes; ``content_within`` parses the
content only up to a size. The message types the host knows are named here once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cellgate.gate.calls.protocol import ProtocolError, strict_loads
from cellgate.gate.session.bounds import MAX_HEADER_BYTES, MAX_METADATA_BYTES
from cellgate.kernel.wire import FILE_CHUNK_BYTES, MAX_REQUEST_BYTES

OUTPUT_TYPES = frozenset({"stream", "display_data", "execute_result", "error"})
IOPUB_TYPES = frozenset({
    "status", "stream", "display_data", "update_display_data", "execute_input", "execute_result", "error",
    "clear_output", "comm_open", "comm_msg", "comm_close", "debug_event", "iopub_welcome", "shutdown_reply",
})
COMM_TYPES = frozenset({"comm_open", "comm_msg", "comm_close"})


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
