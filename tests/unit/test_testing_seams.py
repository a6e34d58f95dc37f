"""The test seams shipped in cellgate.gate.testing, without a sandbox: a scripted approver, a fake tool source."""

from __future__ import annotations

import asyncio
import time

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.approval import ApprovalAnswer, ApprovalRequest, load_approver
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.calls.sources import ToolSource, open_all
from cellgate.gate.testing import FakeToolSource, ScriptedApprover


def request(seq: int, tool: str = "refund", **args: object) -> ApprovalRequest:
    now = time.time()
    return ApprovalRequest(id=f"s-{seq}", session="s", seq=seq, tool=tool, args=dict(args), args_sha256="0" * 64,
                           cell_line=None, source_line=None, requested=now, deadline=now + 60)


def test_scripted_approver_answers_in_order_and_keeps_what_it_was_asked() -> None:
    own = ApprovalAnswer("deny", "person", "too large")
    approver = ScriptedApprover(["allow", False, own])
    assert load_approver(approver) is approver  # a Session takes it as it is

    async def ask_all() -> list[ApprovalAnswer]:
        return [await approver.ask(request(seq, amount=seq)) for seq in range(1, 5)]

    answers = asyncio.run(ask_all())
    assert [(a.decision, a.approver) for a in answers[:2]] == [("allow", "scripted"), ("deny", "scripted")]
    assert answers[2] is own
    # Past its script it denies and says why, instead of hanging the cell.
    assert answers[3].decision == "deny" and "script is exhausted (request 4, tool 'refund')" in answers[3].reason
    assert [(r.seq, r.args) for r in approver.asked] == [(1, {"amount": 1}), (2, {"amount": 2}),
                                                         (3, {"amount": 3}), (4, {"amount": 4})]
    approver.withdraw(approver.asked[0], "interrupted")
    assert approver.withdrawn == [(approver.asked[0], "interrupted")]


def test_scripted_approver_can_decide_from_the_request() -> None:
    approver = ScriptedApprover(lambda req: req.args["amount"] <= 100)

    async def ask_all() -> list[str]:
        return [(await approver.ask(request(n, amount=amount))).decision for n, amount in enumerate((5, 500, 100))]

    assert asyncio.run(ask_all()) == ["allow", "deny", "allow"]
    assert len(approver.asked) == 3


def double(x: int) -> int:
    """Twice x.

    Args:
        x: the number
    """
    return 2 * x


def test_fake_tool_source_serves_its_tools_into_the_session_registry() -> None:
    source = FakeToolSource([double], decision="approve", notes=[{"message": "fake"}])
    registry = ToolRegistry()
    opened = open_all([source], registry)
    assert opened == [source] and source.opened == 1
    assert [(e["name"], e["description"], e["order"]) for e in registry.manifest()] == [("double", "Twice x.", ["x"])]
    tool = registry.get("double")
    assert tool is not None and tool.default_decision == "approve" and tool.source == "fake"
    assert tool.function(21) == 42
    assert source.notes == [{"message": "fake"}]
    source.close()
    assert source.closed == 1


class Broken(ToolSource):
    def open(self) -> list:
        raise ConfigError("broken source: cannot connect; check its address")

    def close(self) -> None:
        pass


def test_a_source_that_fails_to_open_closes_the_ones_already_open() -> None:
    first = FakeToolSource([double])
    with pytest.raises(ConfigError, match="broken source"):
        open_all([first, Broken(first.settings)], ToolRegistry())
    assert (first.opened, first.closed) == (1, 1)


def test_two_sources_with_the_same_tool_name_are_refused() -> None:
    sources = [FakeToolSource([double]), FakeToolSource([double])]
    with pytest.raises(ConfigError, match="tool 'double' is defined twice"):
        open_all(sources, ToolRegistry())
    assert [(s.opened, s.closed) for s in sources] == [(1, 1), (1, 1)]
