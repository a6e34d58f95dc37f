"""A loopback fake of the streaming Anthropic Messages API, for driving the real Claude Code CLI offline.

Claude Code asks ``POST /v1/messages`` with ``"stream": true`` and reads server-sent events
(message_start, content_block_start/delta/stop, message_delta, message_stop), as the API sends them. The
answer to each request comes from ``answer(body)``, a function of the request (the CLI also sends side
requests of its own, e.g. a title or a quota probe, so a fixed list would be fragile); the reply shape is
``cellgate.extensions.anthropic.testing.reply``. Every request body is kept in ``requests``.
"""

from __future__ import annotations

import json
import math
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cellgate.extensions.anthropic.testing import estimate_tokens

Answer = Callable[[dict[str, Any]], dict[str, Any]]


def sse_events(body: dict[str, Any], answer: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events the API streams for one reply: each block opened, its content sent as deltas, closed."""
    content = answer["content"]
    usage = {"input_tokens": estimate_tokens(body), "output_tokens": 1,
             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    yield "message_start", {"type": "message_start", "message": {
        "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
        "model": body.get("model", "fake"), "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": usage}}
    for index, block in enumerate(content):
        if block["type"] == "text":
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    out_tokens = math.ceil(len(json.dumps(content)) / 4)
    yield "message_delta", {"type": "message_delta", "usage": {"output_tokens": out_tokens},
                            "delta": {"stop_reason": answer["stop_reason"], "stop_sequence": None}}
    yield "message_stop", {"type": "message_stop"}


class StreamingMessagesAPI:
    """``POST /v1/messages`` (streamed or not) and ``/v1/messages/count_tokens`` on 127.0.0.1; anything else 404."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                path = self.path.split("?")[0]
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    return self._json(400, _error("invalid_request_error", "the body is not JSON"))
                with api._lock:
                    api.paths.append(path)
                if path == "/v1/messages/count_tokens":
                    return self._json(200, {"input_tokens": estimate_tokens(body)})
                if path != "/v1/messages":
                    return self._json(404, _error("not_found_error", f"{path} is not part of the fake API"))
                with api._lock:
                    api.requests.append(body)
                reply = api.answer(body)
                if body.get("stream"):
                    return self._stream(body, reply)
                self._json(200, {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
                                 "model": body.get("model", "fake"), "content": reply["content"],
                                 "stop_reason": reply["stop_reason"], "stop_sequence": None,
                                 "usage": {"input_tokens": estimate_tokens(body), "output_tokens": 1}})

            def do_GET(self) -> None:  # noqa: N802
                with api._lock:
                    api.paths.append(self.path.split("?")[0])
                self._json(404, _error("not_found_error", f"{self.path} is not part of the fake API"))

            def _stream(self, body: dict[str, Any], reply: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
                for event, data in sse_events(body, reply):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-streaming-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> StreamingMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
