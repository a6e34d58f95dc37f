"""An approval request names whom the session acts for (an MCP principal), through the queue's files too."""

from __future__ import annotations

import json
from dataclasses import asdict

from cellgate.gate.calls.approval import ApprovalRequest, describe_full, describe_request
from cellgate.gate.calls.approval_queue import request_from


def request(principal: str | None) -> ApprovalRequest:
    return ApprovalRequest(id="5e55101d0123-4", session="5e55101d0123" * 2, seq=4, tool="deploy",
                           args={"env": "prod"}, args_sha256="0" * 64, cell_line=None, source_line=None,
                           requested=1.0, deadline=2.0, principal=principal)


def test_the_request_names_the_principal_that_asked_escaped() -> None:
    asked = request("ci\u202e-bot")
    through_the_queue = request_from(json.loads(json.dumps(asdict(asked))))
    assert through_the_queue.principal == "ci\u202e-bot"
    for text in (describe_request(through_the_queue), describe_full(through_the_queue)[0]):
        assert "asked by:  principal ci\\u202e-bot" in text and "\u202e" not in text


def test_a_local_session_s_request_names_no_principal() -> None:
    local = request_from(json.loads(json.dumps(asdict(request(None)))))
    assert local.principal is None
    assert "asked by" not in describe_request(local) and "asked by" not in describe_full(local)[0]
