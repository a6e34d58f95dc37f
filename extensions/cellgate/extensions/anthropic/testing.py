"""A local fake of the Anthropic Messages API, for offline runs of agent loops.

``FakeMessagesAPI`` is a scripted stand-in that the real ``anthropic`` SDK
talks to through its base URL (point ``base_url`` at ``FakeMessagesAPI.url``);
shipped as public API as httpx ships ``MockTransport``. It checks each request
as the API does (``request_problem``) and answers a malformed one with the
API's 400 ``invalid_request_error``, so a loop that would fail against the real
API fails against the fake.
"""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["APIFailure", "FakeMessagesAPI", "estimate_tokens", "reply", "request_problem", "text", "tool_use"]

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


# What a Messages API request may hold (the API answers 400 to anything else): the SDK's create() parameters,
# its beta ones among them (Claude Code sends those).
REQUEST_FIELDS = frozenset({
    "model", "messages", "max_tokens", "system", "tools", "tool_choice", "temperature", "top_p", "top_k",
    "stop_sequences", "stream", "metadata", "thinking", "service_tier", "container", "mcp_servers",
    "context_management", "cache_control", "output_config", "output_format", "inference_geo", "speed",
    "diagnostics", "user_profile_id", "workspace_id", "billing_policy", "compaction", "fallback_credit_token",
    "fallbacks", "thread"})
BLOCK_TYPES = {
    "user": frozenset({"text", "image", "document", "search_result", "tool_result", "container_upload"}),
    "assistant": frozenset({"text", "tool_use", "thinking", "redacted_thinking", "server_tool_use",
                            "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
                            "mcp_tool_use", "mcp_tool_result"}),
}
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def request_problem(body: Any, *, count_tokens: bool = False) -> str | None:
    """What the Messages API would refuse in ``body`` (its 400 message, in its words), or None if it is well formed.

    Checked: the fields are known, ``model`` is named, ``max_tokens`` is a positive integer (not for
    ``count_tokens``), ``messages`` alternate user and assistant starting with user, each block is of a type its
    role may send with the fields it needs, every ``tool_use`` of an assistant turn is answered by a
    ``tool_result`` in the next user turn (those first, and naming no other id), and tools have valid names.
    """
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    extra = sorted(set(body) - REQUEST_FIELDS - ({"max_tokens"} if count_tokens else set()))
    if extra:
        return f"{extra[0]}: Extra inputs are not permitted"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    if not count_tokens:
        tokens = body.get("max_tokens")
        if tokens is None:
            return "max_tokens: Field required"
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            return f"max_tokens: must be a positive integer, got {tokens!r}"
    return _tools_problem(body.get("tools")) or _system_problem(body.get("system")) or \
        _messages_problem(body.get("messages"))


def _tools_problem(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names = set()
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return f"tools.{index}.name: Field required"
        if tool.get("type", "custom") == "custom":
            if not TOOL_NAME.match(tool["name"]):
                return f"tools.{index}.custom.name: String should match pattern '{TOOL_NAME.pattern}'"
            if not isinstance(tool.get("input_schema"), dict):
                return f"tools.{index}.custom.input_schema: Field required"
        if tool["name"] in names:
            return f"tools: Tool names must be unique ({tool['name']!r} is repeated)"
        names.add(tool["name"])
    return None


def _system_problem(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return None
    if isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                        and isinstance(b.get("text"), str) for b in system):
        return None
    return "system: Input should be a valid string or a list of text blocks"


def _messages_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    asked: list[str] = []  # the tool_use ids of the assistant turn before, to be answered now
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict) or message.get("role") not in BLOCK_TYPES:
            return f"{where}.role: Input should be 'user' or 'assistant'"
        role = message["role"]
        if role != ("user" if index % 2 == 0 else "assistant"):
            return (f"{where}: roles must alternate between \"user\" and \"assistant\", starting with \"user\" "
                    f"(this one is {role!r})")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or (not blocks and (role == "user" or index < len(messages) - 1)):
            return (f"{where}: all messages must have non-empty content except for the optional final assistant "
                    "message")
        problem = _blocks_problem(where, role, blocks, asked, last=index == len(messages) - 1)
        if problem:
            return problem
        asked = [b["id"] for b in blocks if b["type"] == "tool_use"] if role == "assistant" else []
    return None


def _blocks_problem(where: str, role: str, blocks: list[Any], asked: list[str], last: bool) -> str | None:
    answered: list[str] = []
    for position, block in enumerate(blocks):
        at = f"{where}.content.{position}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCK_TYPES[role]:
            return f"{at}.type: {kind!r} is not a content block type a {role} message may send"
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
            return f"{where}: text content blocks must be non-empty"
        if kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) or \
                    not isinstance(block.get("input"), dict):
                return f"{at}: a tool_use block needs an id, a name and an input object"
        if kind == "tool_result":
            use_id = block.get("tool_use_id")
            if use_id not in asked or use_id in answered:
                return (f"{at}: unexpected `tool_use_id` found in `tool_result` blocks: {use_id!r}. Each "
                        "`tool_result` block must have a corresponding `tool_use` block in the previous message.")
            if position != len(answered):
                return f"{at}: tool_result blocks must come first in the user message's content"
            answered.append(use_id)
    missing = [use_id for use_id in asked if use_id not in answered]
    if missing:
        return (f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block in the "
                "next message.")
    return None


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
    request. Every well-formed request body is kept in ``requests`` for
    assertions; a malformed one gets the API's 400 and is kept, with the
    reason, in ``refused`` (it uses up no step of the script).
    """

    def __init__(self, script: list[Reply | APIFailure | Script]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.refused: list[tuple[Any, str]] = []
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
                if path not in ("/v1/messages", "/v1/messages/count_tokens"):
                    return self._send(404, _error("not_found_error", f"{path} is not part of the fake API"))
                problem = request_problem(body, count_tokens=path.endswith("/count_tokens"))
                if problem:
                    with api._lock:
                        api.refused.append((body, problem))
                    return self._send(400, _error("invalid_request_error", problem))
                if path == "/v1/messages/count_tokens":
                    return self._send(200, {"input_tokens": estimate_tokens(body)})
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
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-messages-api",
                                        daemon=True)

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
