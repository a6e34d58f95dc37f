"""A local fake of the Anthropic Messages API, for offline runs of agent loops.

``FakeMessagesAPI`` is a scripted stand-in that the real ``anthropic`` SDK
talks to through its base URL (point ``base_url`` at ``FakeMessagesAPI.url``);
shipped as public API as httpx ships ``MockTransport``.
"""

from __future__ import annotations

import json
import math
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["APIFailure", "FakeMessagesAPI", "estimate_tokens", "reply", "text", "tool_use"]

Reply = dict[str, Any]
Script = Callable[[dict[str, Any]], Reply]

IMAGE_TOKENS = 1600  # the API's estimate for a ~1.15 megapixel image


def estimate_tokens(body: dict[str, Any]) -> int:
    """The offline token estimate: about 4 characters of JSON per token, images at a flat rate.

    A documented stand-in for the API's own count (``messages.count_tokens``),
    used when no real endpoint is available; ratios between runs measured the
    same way are what it is for.
    """
    images = 0

    def strip_images(value: Any) -> Any:
        nonlocal images
        if isinstance(value, dict):
            if value.get("type") == "image":
                images += 1
                return None
            return {k: strip_images(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip_images(v) for v in value]
        return value

    counted = {key: strip_images(body.get(key)) for key in ("system", "messages", "tools") if body.get(key)}
    text = json.dumps(counted, ensure_ascii=False, separators=(",", ":"))
    return math.ceil(len(text) / 4) + images * IMAGE_TOKENS


def text(value: str) -> dict[str, Any]:
    """A text content block for a scripted reply."""
    return {"type": "text", "text": value}


def tool_use(name: str, tool_input: dict[str, Any], use_id: str | None = None) -> dict[str, Any]:
    """A tool_use content block for a scripted reply."""
    return {"type": "tool_use", "id": use_id or f"toolu_{uuid.uuid4().hex[:24]}", "name": name, "input": tool_input}


def reply(*blocks: dict[str, Any], stop_reason: str | None = None) -> Reply:
    """A scripted model reply; stop_reason defaults to tool_use when a block uses a tool, else end_turn."""
    uses = any(b["type"] == "tool_use" for b in blocks)
    return {"content": list(blocks), "stop_reason": stop_reason or ("tool_use" if uses else "end_turn")}


@dataclass(frozen=True)
class APIFailure:
    """A scripted HTTP error (e.g. 529 overloaded) instead of a reply; the SDK's retries see it."""

    status: int
    kind: str = "overloaded_error"
    message: str = "scripted failure"


class FakeMessagesAPI:
    """Speaks ``POST /v1/messages`` (non-streaming) and ``POST /v1/messages/count_tokens``.

    ``script`` is a list whose items answer one request each, in order: a
    reply dict (see ``reply``), an ``APIFailure``, or a callable that gets the
    request body and returns either. Usage is ``estimate_tokens`` of the
    request. Every request body is kept in ``requests`` for assertions.
    """

    def __init__(self, script: list[Reply | APIFailure | Script]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    return self._send(400, _error("invalid_request_error", "the body is not JSON"))
                path = self.path.split("?")[0]
                if path == "/v1/messages/count_tokens":
                    return self._send(200, {"input_tokens": estimate_tokens(body)})
                if path != "/v1/messages":
                    return self._send(404, _error("not_found_error", f"{path} is not part of the fake API"))
                if body.get("stream"):
                    return self._send(400, _error("invalid_request_error", "the fake API does not stream"))
                status, payload = api._answer(body)
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if status >= 500:
                    self.send_header("retry-after-ms", "10")
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-messages-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
            if not self.script:
                return 500, _error("api_error", f"the fake API's script is exhausted (request {len(self.requests)})")
            step = self.script.pop(0)
        answer = step(body) if callable(step) else step
        if isinstance(answer, APIFailure):
            return answer.status, _error(answer.kind, answer.message)
        content = answer["content"]
        out_text = json.dumps(content, ensure_ascii=False)
        return 200, {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": body.get("model", "fake"), "content": content, "stop_reason": answer["stop_reason"],
            "stop_sequence": None,
            "usage": {"input_tokens": estimate_tokens(body), "output_tokens": math.ceil(len(out_text) / 4),
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }

    def start(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> FakeMessagesAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
