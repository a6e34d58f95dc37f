"""How a message crosses the relay: checked with one side's key, signed with the other's.

The kernel and the frontends have different HMAC keys (the frontend's never
enters the sandbox), so nothing the kernel signs is accepted by a frontend as
is. Towards the kernel, a frontend's request keeps its bytes and gets a new
signature (``resign``). Towards the frontends, nothing of the kernel's frames
is sent on: each message was parsed by the relay's strict unpacker, its MIME
bundles are sanitized (``cellgate.gate.audit.sanitize``), and it is serialized
again and signed with the frontends' key (``iopub_frames``, ``reply_frames``).

The host adds what only it knows to ``kernel_info_reply``: the config file in use and the audit notebook's path,
in the banner (``jupyter console`` and JupyterLab's consoles print it) and as ``language_info["cellgate"]``
(nbclient and papermill copy ``language_info`` into the executed notebook's metadata, JupyterLab into a saved
one's; nbformat's schema allows extra keys there).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable
from typing import Any, cast

from jupyter_client.session import Session

from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.audit.sanitize import sanitize_bundle
from cellgate.gate.session.launch import where_it_records
from cellgate.gate.session.relay.messages import COMM_TYPES
from cellgate.gate.session.relay.notices import DISPLAY_PREFIX

DELIM = b"<IDS|MSG>"
BUNDLE_TYPES = frozenset({"display_data", "execute_result", "update_display_data"})


class SignatureError(ValueError):
    pass


def _checked(frames: list[bytes], src: Session) -> tuple[list[bytes], list[bytes]]:
    """(identities, frames after the delimiter) of a message signed with ``src``'s key."""
    idents, feed = src.feed_identities(frames)
    rest = cast(list[bytes], feed)  # the relay reads with copy=True: bytes, never zmq.Frame
    if len(rest) < 5:
        raise SignatureError(f"{len(rest)} frames after the delimiter, at least 5 expected")
    if not hmac.compare_digest(rest[0], src.sign(rest[1:5])):
        raise SignatureError("invalid signature")
    return cast(list[bytes], list(idents)), list(rest)


def resign(frames: list[bytes], src: Session, dst: Session) -> list[bytes]:
    """The same message with ``dst``'s signature, after checking ``src``'s (raises SignatureError)."""
    idents, rest = _checked(frames, src)
    return [*idents, DELIM, dst.sign(rest[1:5]), *rest[1:]]


def _serialize(msg: dict[str, Any], content: Any, session: Session, idents: list[bytes],
               buffers: Iterable[Any] = ()) -> list[bytes]:
    fresh = {"header": msg["header"], "parent_header": msg.get("parent_header") or {},
             "metadata": msg.get("metadata") if isinstance(msg.get("metadata"), dict) else {}, "content": content}
    return [*session.serialize(fresh, ident=idents), *(bytes(b) for b in buffers)]


def _bundle(content: dict[str, Any], trusted: Iterable[str]) -> dict[str, Any]:
    data, metadata, _ = sanitize_bundle(content.get("data"), content.get("metadata"), trusted)
    return {**content, "data": data, "metadata": metadata}


def iopub_frames(msg: dict[str, Any], session: Session, trusted: Iterable[str], allow_comms: bool) -> list[bytes] | None:
    """A kernel's IOPub message rebuilt for frontends, or None when it must not reach them."""
    msg_type = msg["header"]["msg_type"]
    content = msg["content"] if isinstance(msg["content"], dict) else {}
    buffers: Iterable[Any] = ()
    if msg_type in COMM_TYPES:
        if not allow_comms:
            return None
        buffers = msg.get("buffers") or ()
    elif msg_type in BUNDLE_TYPES:
        content = _bundle(content, trusted)
        transient = content.get("transient")
        if transient is not None:
            display_id = transient.get("display_id") if isinstance(transient, dict) else None
            # Display ids with the host's prefix are its notices' (``notices``): never the kernel's.
            kept = isinstance(display_id, str) and not display_id.startswith(DISPLAY_PREFIX)
            content["transient"] = {"display_id": display_id} if kept else {}
    return _serialize(msg, content, session, [f"kernel.{msg_type}".encode()], buffers)


def kernel_info(content: dict[str, Any], about: Recorder) -> dict[str, Any]:
    """A kernel_info_reply's content that says where the session records: after the kernel's banner, and as
    ``language_info["cellgate"]`` (whatever the kernel put there is replaced: only the host knows)."""
    lines = where_it_records(about)
    banner = content.get("banner")
    content["banner"] = "\n".join([banner.rstrip("\n"), *lines] if isinstance(banner, str) and banner else lines)
    language = content.get("language_info")
    if isinstance(language, dict):
        config = about.metadata.get("config")
        file = config.get("file") if isinstance(config, dict) else None
        content["language_info"] = {**language, "cellgate": {"audit_notebook": str(about.notebook_path),
                                                             "config": file if isinstance(file, str) else None}}
    return content


def sanitize_reply(msg_type: str, content: Any, trusted: Iterable[str], about: Recorder | None = None) -> Any:
    """The MIME bundles a frontend renders from a reply: pager payloads, inspection, rich variables; and where
    the session of ``about`` records, in a kernel_info_reply."""
    if not isinstance(content, dict):
        return content
    content = dict(content)
    if msg_type == "execute_reply":
        payload = content.get("payload")
        if isinstance(payload, list):
            content["payload"] = [_bundle(p, trusted) if isinstance(p, dict) and "data" in p else p for p in payload]
        expressions = content.get("user_expressions")
        if isinstance(expressions, dict):
            content["user_expressions"] = {k: _bundle(v, trusted) if isinstance(v, dict) and "data" in v else v
                                           for k, v in expressions.items()}
    elif msg_type == "inspect_reply" and "data" in content:
        content = _bundle(content, trusted)
    elif msg_type == "kernel_info_reply":
        links = content.get("help_links")
        if isinstance(links, list):
            content["help_links"] = [link for link in links if isinstance(link, dict)
                                     and str(link.get("url", "")).lower().startswith(("https://", "http://"))]
        if about is not None:
            content = kernel_info(content, about)
    elif msg_type == "debug_reply":
        body = content.get("body")
        if isinstance(body, dict) and "data" in body:
            content["body"] = _bundle(body, trusted)
    return content


def reply_frames(frames: list[bytes], src: Session, dst: Session, trusted: Iterable[str],
                 max_content: int, about: Recorder | None = None) -> list[bytes]:
    """A kernel's shell, control or stdin message rebuilt for frontends (raises on a bad message,
    and on content over ``max_content`` bytes, which is never parsed)."""
    idents, rest = _checked(frames, src)  # not src.deserialize: the relay may have read it already (replay check)
    if len(rest[4]) > max_content:
        raise ValueError(f"content of {len(rest[4])} bytes, over the {max_content} the relay parses; dropped")
    header, parent, metadata, content = (src.unpack(part) for part in rest[1:5])
    if not isinstance(header, dict) or not isinstance(parent, dict):
        raise SignatureError("header or parent header is not an object")
    msg = {"header": header, "parent_header": parent, "metadata": metadata}
    return _serialize(msg, sanitize_reply(str(header.get("msg_type")), content, trusted, about), dst, idents)


def shutdown_content(frames: list[bytes]) -> dict[str, Any] | None:
    """The content of a frontend's shutdown_request (frames already verified with the frontends' key), else None."""
    try:
        parts = frames[frames.index(DELIM) + 1:]
        if json.loads(parts[1]).get("msg_type") != "shutdown_request":
            return None
        content = json.loads(parts[4])
    except (ValueError, IndexError, AttributeError):  # odd but signed: the kernel's to judge
        return None
    return content if isinstance(content, dict) else {}
