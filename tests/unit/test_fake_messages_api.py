"""The fake Messages API refuses what the real one refuses: a loop's malformed request gets the API's 400 through the
real ``anthropic`` SDK (``anthropic.BadRequestError``), not a scripted reply."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from cellgate.extensions.anthropic.testing import FakeMessagesAPI, reply, request_problem, text, tool_use

USE = tool_use("execute_python", {"code": "print(1)"}, "toolu_a")
TOOLS = [{"name": "execute_python", "description": "Run Python.", "input_schema": {"type": "object"}}]


def turn(*blocks: dict[str, Any], role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": list(blocks)}


def result(use_id: str, content: str = "1\n") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": content}


GOOD = [turn(text("go")), turn(USE, role="assistant"), turn(result("toolu_a"))]


@pytest.fixture()
def api() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI([reply(text("done"))]) as fake:
        yield fake


def client(api: FakeMessagesAPI) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url=api.url, max_retries=0)


def test_a_well_formed_loop_turn_is_answered(api: FakeMessagesAPI) -> None:
    answer = client(api).messages.create(model="claude-x", max_tokens=64, messages=GOOD, tools=TOOLS)
    assert [b.text for b in answer.content] == ["done"] and api.refused == [] and len(api.requests) == 1


@pytest.mark.parametrize(("max_tokens", "messages", "says"), [
    (0, GOOD, "max_tokens: must be a positive integer, got 0"),
    (64, [turn(text("go")), turn(text("again"))], "messages.1: roles must alternate"),
    (64, [turn(text("hi"), role="assistant")], "messages.0: roles must alternate"),
    (64, [*GOOD[:2], turn(result("toolu_b"))],
     "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: 'toolu_b'"),
    (64, [*GOOD[:2], turn(text("no result"))], "messages.2: `tool_use` ids were found without `tool_result` blocks"),
    (64, [*GOOD[:2], turn(text("first"), result("toolu_a"))], "tool_result blocks must come first"),
    (64, [turn({"type": "bogus", "text": "x"})], "messages.0.content.0.type: 'bogus' is not a content block type"),
    (64, [turn(text(""))], "text content blocks must be non-empty"),
    (64, [turn(USE)], "'tool_use' is not a content block type a user message may send"),
    (64, [turn()], "messages.0: all messages must have non-empty content"),
], ids=["max_tokens 0", "two user turns", "assistant first", "result of no use", "use unanswered",
        "result not first", "unknown block", "empty text", "tool_use from the user", "empty user turn"])
def test_a_malformed_request_is_a_400_through_the_sdk(api: FakeMessagesAPI, max_tokens: int,
                                                     messages: list[dict[str, Any]], says: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client(api).messages.create(model="claude-x", max_tokens=max_tokens, messages=messages, tools=TOOLS)
    assert raised.value.status_code == 400
    error = raised.value.body["error"]  # the API's shape: {"type": "error", "error": {"type": ..., "message": ...}}
    assert raised.value.body["type"] == "error" and error["type"] == "invalid_request_error"
    assert says in error["message"], error["message"]
    assert api.requests == [] and [reason for _, reason in api.refused] == [error["message"]]
    assert len(api.script) == 1  # the scripted reply is still there for a good request


def test_what_the_sdk_cannot_send_is_refused_too() -> None:
    """max_tokens is a required argument of the SDK's create(); a hand-made body can still leave it out."""
    assert request_problem({"model": "m", "messages": GOOD}) == "max_tokens: Field required"
    assert request_problem({"model": "m", "max_tokens": True, "messages": GOOD}).startswith("max_tokens: must be")
    assert request_problem({"model": "m", "max_tokens": 1, "messages": GOOD, "colour": 1}) == \
        "colour: Extra inputs are not permitted"
    assert request_problem({"model": "m", "max_tokens": 1, "messages": GOOD,
                            "tools": [{"name": "bad name", "input_schema": {}}]}).startswith("tools.0.custom.name")
    assert request_problem({"model": "m", "max_tokens": 1, "messages": GOOD}) is None
    assert request_problem({"model": "m", "messages": GOOD}, count_tokens=True) is None  # count_tokens takes none
    assert request_problem({"model": "m", "messages": []}, count_tokens=True).startswith("messages: at least one")
    prefill = [turn(text("go")), turn(role="assistant")]  # an empty final assistant turn is the API's prefill
    assert request_problem({"model": "m", "max_tokens": 1, "messages": prefill}) is None


def test_count_tokens_checks_the_messages_as_well(api: FakeMessagesAPI) -> None:
    sdk = client(api)
    assert sdk.messages.count_tokens(model="claude-x", messages=GOOD, tools=TOOLS).input_tokens > 0
    with pytest.raises(anthropic.BadRequestError, match="roles must alternate"):
        sdk.messages.count_tokens(model="claude-x", messages=[turn(text("a")), turn(text("b"))])
