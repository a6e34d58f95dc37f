"""Policy rules that name principals (issue 20): a tool allowed for one principal of `cellgate mcp serve`, its
default for everyone else; a policy naming none records exactly as before."""

from __future__ import annotations

from cellgate.gate.calls.policy import Call, Counters, Policy, decision_table, evaluate

POLICY = Policy.model_validate({"default": "deny", "tools": {"deploy": {
    "decision": "approve",
    "rules": [{"name": "ops deploy", "when": {}, "principals": ["alice", "ci"], "decision": "allow"}]}}})


def decide(principal: str | None) -> tuple[str, str]:
    verdict = evaluate(Call("deploy", {}, 2, principal=principal), POLICY, Counters(), 0.0)
    return verdict.decision, verdict.rule


def test_a_rule_naming_principals_decides_only_their_calls() -> None:
    assert decide("alice") == ("allow", "tools.deploy.rules[0] (ops deploy)")
    assert decide("ci") == ("allow", "tools.deploy.rules[0] (ops deploy)")
    assert decide("bob") == ("approve", "tools.deploy.decision")
    assert decide(None) == ("approve", "tools.deploy.decision")  # a session nobody claimed (stdio, a notebook)


def test_a_policy_naming_no_principal_records_as_before() -> None:
    plain = Policy.model_validate({"tools": {"t": {"rules": [{"when": {}, "decision": "allow"}]}}})
    assert plain.model_dump(mode="json")["tools"]["t"]["rules"] == [{"name": None, "when": {}, "decision": "allow"}]
    (row,) = decision_table(POLICY, ["deploy"])
    assert row["rules"] == "ops deploy: {} for ['alice', 'ci'] -> allow"
