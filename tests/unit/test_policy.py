"""The pure policy function: default deny, rule order, schema matching, budgets, rate limits."""

from __future__ import annotations

import pytest

from cellgate.gate.calls.policy import Call, Counters, Policy, evaluate


def policy(**data: object) -> Policy:
    return Policy.model_validate(data)


def call(tool: str = "issue_refund", **args: object) -> Call:
    return Call(tool=tool, args=dict(args), arg_bytes=len(str(args)))


REFUNDS = policy(tools={"issue_refund": {
    "decision": "allow",
    "rules": [
        {"name": "huge", "when": {"properties": {"amount": {"minimum": 10_000}}}, "decision": "deny"},
        {"name": "big", "when": {"properties": {"amount": {"exclusiveMinimum": 100}}}, "decision": "approve"},
    ]}})


def test_a_tool_not_named_is_denied_by_default() -> None:
    verdict = evaluate(call("rm_rf"), Policy(), Counters(), 0.0)
    assert (verdict.decision, verdict.rule, verdict.kind) == ("deny", "default", "denied")


def test_default_can_be_changed() -> None:
    assert evaluate(call("x"), policy(default="approve"), Counters(), 0.0).decision == "approve"


def test_source_default_applies_only_when_the_policy_is_silent() -> None:
    granted = Call(tool="t", args={}, arg_bytes=2, source_default="allow")
    assert evaluate(granted, Policy(), Counters(), 0.0).rule == "tool default for t"
    assert evaluate(granted, policy(tools={"t": {"decision": "deny"}}), Counters(), 0.0).decision == "deny"


@pytest.mark.parametrize(("amount", "decision", "rule"), [
    (50, "allow", "tools.issue_refund.decision"),
    (100, "allow", "tools.issue_refund.decision"),
    (101, "approve", "tools.issue_refund.rules[1] (big)"),
    (50_000, "deny", "tools.issue_refund.rules[0] (huge)"),  # first match wins: both rules match
])
def test_rules_match_arguments_by_json_schema_first_match_wins(amount: int, decision: str, rule: str) -> None:
    verdict = evaluate(call(amount=amount), REFUNDS, Counters(), 0.0)
    assert (verdict.decision, verdict.rule) == (decision, rule)


def run_cells(rules: Policy, cells: list[int]) -> list[str]:
    """Issue cells[i] calls in cell i; the rule that refused each, or 'ok'."""
    counters, outcome = Counters(), []
    for calls in cells:
        counters.new_cell()
        for _ in range(calls):
            verdict = evaluate(call("t"), rules, counters, 0.0)
            outcome.append("ok" if verdict.kind == "ok" else verdict.rule)
            if verdict.kind == "ok":
                counters.record(call("t"), rules, 0.0)
    return outcome


def test_per_cell_budget_resets_with_each_cell_and_session_budget_does_not() -> None:
    rules = policy(default="allow", max_calls_per_cell=2, max_calls_per_session=5)
    assert run_cells(rules, [3, 3, 2]) == [
        "ok", "ok", "max_calls_per_cell", "ok", "ok", "max_calls_per_cell", "ok", "max_calls_per_session"]


def test_per_tool_budgets() -> None:
    rules = policy(tools={"t": {"decision": "allow", "max_calls_per_session": 3, "max_calls_per_cell": 2}})
    assert run_cells(rules, [3, 3]) == [
        "ok", "ok", "tools.t.max_calls_per_cell", "ok", "tools.t.max_calls_per_session",
        "tools.t.max_calls_per_session"]


def test_budget_verdict_names_limit_and_count() -> None:
    counters = Counters(session=10)
    verdict = evaluate(call("t"), policy(default="allow", max_calls_per_session=10), counters, 0.0)
    assert (verdict.kind, verdict.limit, verdict.count) == ("budget", 10, 10)
    assert "per-session budget of 10 calls is used up" in verdict.reason


def test_rate_limit_is_a_token_bucket() -> None:
    rules = policy(tools={"t": {"decision": "allow", "rate": "2/s"}})
    counters = Counters()
    kinds = []
    for now in (0.0, 0.0, 0.0, 0.6, 0.6, 1.6):
        verdict = evaluate(call("t"), rules, counters, now)
        kinds.append(verdict.kind)
        if verdict.kind == "ok":
            counters.record(call("t"), rules, now)
    assert kinds == ["ok", "ok", "rate_limited", "ok", "rate_limited", "ok"]


def test_argument_size_limit() -> None:
    verdict = evaluate(Call("t", {}, 10_000), policy(default="allow", max_arg_bytes=1000), Counters(), 0.0)
    assert (verdict.kind, verdict.rule) == ("invalid", "max_arg_bytes")


def test_evaluate_does_not_change_counters() -> None:
    counters = Counters()
    evaluate(call(amount=1), REFUNDS, counters, 0.0)
    assert counters == Counters()


@pytest.mark.parametrize(("data", "fragment"), [
    ({"default": "maybe"}, "default"),
    ({"tools": {"t": {"rate": "fast"}}}, "must look like '20/s'"),
    ({"tools": {"t": {"rules": [{"when": {"type": 12}, "decision": "allow"}]}}}, "not a valid JSON Schema"),
    ({"tools": {"t": {"decison": "allow"}}}, "decison"),
    # A keyword JSON Schema does not define is ignored by it: the rule would match every call (issue 43).
    ({"tools": {"t": {"rules": [{"when": {"arg": "path", "equals": "/tmp/safe"}, "decision": "allow"}]}}},
     "'arg', 'equals', which JSON Schema does not define"),
    ({"tools": {"t": {"rules": [{"when": {"properties": {"path": {"equal": "x"}}}, "decision": "allow"}]}}},
     "'equal', which"),
    ({"tools": {"t": {"rules": [{"when": {"anyOf": [{"not": {"maximun": 3}}]}, "decision": "allow"}]}}},
     "'maximun', which"),
])
def test_malformed_policies_are_rejected(data: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        Policy.model_validate(data)


def test_every_rule_of_the_examples_and_tests_is_plain_json_schema() -> None:
    """The check refuses only what JSON Schema lacks: a rule of every keyword family the docs use still loads."""
    when = {"properties": {"amount": {"type": "number", "maximum": 100, "exclusiveMinimum": 0},
                           "to": {"enum": ["a", "b"]}, "path": {"pattern": "^/tmp/"}},
            "required": ["amount"], "anyOf": [{"not": {"properties": {"to": {"const": "a"}}}}, True],
            "additionalProperties": {"type": "string"}, "$defs": {"x": {"minLength": 1}}}
    policy = Policy.model_validate({"tools": {"t": {"rules": [{"when": when, "decision": "allow"}]}}})
    assert policy.tools["t"].rules[0].matches({"amount": 5})
    assert not policy.tools["t"].rules[0].matches({"amount": 500})
