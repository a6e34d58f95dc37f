"""Tools the owning program hands a session (functions, Tools): allowed by default, overridable per tool."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cellgate.gate import SyncSession, tool_from_function
from cellgate.gate.testing import ScriptedApprover

pytestmark = pytest.mark.gvisor


def lookup(key: str) -> str:
    """The value stored under key."""
    return f"value of {key}"


def wipe(table: str) -> int:
    """Delete every row of table."""
    return 0


def refund(order: int, amount: float) -> str:
    """Refund part of an order."""
    return f"refunded {amount} on {order}"


def forbidden(x: int) -> int:
    """A function the program allows and the operator's policy denies."""
    return x


CELL = """
for call in (lambda: tools.lookup("a"), lambda: tools.wipe("orders"), lambda: tools.refund(7, 2.5),
             lambda: tools.refund(8, 9.0), lambda: tools.forbidden(1)):
    try:
        print("ok", call())
    except tools.ToolDenied as exc:
        print("denied", type(exc).__name__)
"""


def test_program_tools_are_allowed_unless_the_tool_or_the_policy_says_otherwise(runsc: object, tmp_path: Path) -> None:
    # [policy] default is deny: a callable the program hands over is still allowed, the policy still wins.
    (tmp_path / "cellgate.toml").write_text('[policy]\ndefault = "deny"\n\n[policy.tools.forbidden]\n'
                                            'decision = "deny"\n')
    approver = ScriptedApprover(["allow", "deny"])
    tools = [lookup, replace(tool_from_function(wipe), decision="deny"),
             tool_from_function(refund, decision="ask"), forbidden]
    with SyncSession(tools=tools, config=tmp_path / "cellgate.toml", approver=approver,
                     notebook=tmp_path / "run.ipynb", cwd=tmp_path) as box:
        assert [t["name"] for t in box.session.manifest] == ["forbidden", "lookup", "refund", "wipe"]
        result = box.execute(CELL)
    assert result.ok, result.text
    assert result.stdout.splitlines() == ["ok value of a", "denied ToolDenied", "ok refunded 2.5 on 7",
                                          "denied ToolDenied", "denied ToolDenied"]
    decided = [(c.tool, c.decision, c.rule) for c in result.calls]
    assert decided == [("lookup", "allow", "tool default for lookup"), ("wipe", "deny", "tool default for wipe"),
                       ("refund", "approved", "tool default for refund"), ("refund", "approval-denied", "tool default for refund"),
                       ("forbidden", "deny", "tools.forbidden.decision")]
    assert [(r.tool, r.args) for r in approver.asked] == [("refund", {"order": 7, "amount": 2.5}),
                                                          ("refund", {"order": 8, "amount": 9.0})]
