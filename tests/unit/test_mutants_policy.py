"""The policy function's exact verdicts, counters and tables: each assertion kills mutants of calls/policy.py that
the behaviour tests let through (scripts/mutation policy; CONTRIBUTING, "Mutation testing")."""

from __future__ import annotations

from cellgate.gate.calls.policy import (
    Call,
    CellCounts,
    Counters,
    Policy,
    Verdict,
    decision_table,
    evaluate,
    lineage_budgets,
    parse_rate,
    policy_sha256,
    unrequired_constraints,
)


def policy(**data: object) -> Policy:
    return Policy.model_validate(data)


def call(tool: str = "t", arg_bytes: int = 10, **args: object) -> Call:
    return Call(tool=tool, args=dict(args), arg_bytes=arg_bytes)


def test_argument_size_verdict_exactly() -> None:
    p = policy(max_arg_bytes=10, default="allow")
    assert evaluate(call(arg_bytes=10), p, Counters(), 0.0).decision == "allow"  # at the limit: allowed
    assert evaluate(call(arg_bytes=11), p, Counters(), 0.0) == Verdict(
        "deny", "max_arg_bytes", "arguments of 11 bytes exceed the 10 byte limit", kind="invalid", limit=10, count=11)


def test_budget_verdicts_exactly_at_the_limit() -> None:
    p = policy(default="allow", max_calls_per_cell=2, max_calls_per_session=3,
               tools={"t": {"max_calls_per_session": 5, "max_calls_per_cell": 4}})
    assert evaluate(call(), p, Counters(session=2, cell=1), 0.0).decision == "allow"
    assert evaluate(call(), p, Counters(session=0, cell=2), 0.0) == Verdict(
        "deny", "max_calls_per_cell", "per-cell budget of 2 calls is used up (2 made)", kind="budget", limit=2, count=2)
    assert evaluate(call(), p, Counters(session=3, cell=0), 0.0) == Verdict(
        "deny", "max_calls_per_session", "per-session budget of 3 calls is used up (3 made)", kind="budget",
        limit=3, count=3)
    q = policy(default="allow", tools={"t": {"max_calls_per_session": 2, "max_calls_per_cell": 1}})
    assert evaluate(call(), q, Counters(per_tool={"t": 2}), 0.0) == Verdict(
        "deny", "tools.t.max_calls_per_session", "'t' per-session budget of 2 calls is used up (2 made)",
        kind="budget", limit=2, count=2)
    assert evaluate(call(), q, Counters(per_tool={"t": 1}, per_tool_cell={"t": 1}), 0.0) == Verdict(
        "deny", "tools.t.max_calls_per_cell", "'t' per-cell budget of 1 calls is used up (1 made)",
        kind="budget", limit=1, count=1)
    # another tool's counts do not spend this tool's budgets
    assert evaluate(call(), q, Counters(per_tool={"u": 9}, per_tool_cell={"u": 9}), 0.0).decision == "allow"
    # a cell's own counts replace the counters' current cell
    assert evaluate(call(), q, Counters(per_tool_cell={"t": 5}), 0.0, CellCounts()).decision == "allow"
    assert evaluate(call(), q, Counters(), 0.0, CellCounts(calls=0, per_tool={"t": 1})).rule == \
        "tools.t.max_calls_per_cell"
    assert evaluate(call(), p, Counters(cell=0), 0.0, CellCounts(calls=2)).rule == "max_calls_per_cell"


def test_no_limit_means_no_budget() -> None:
    p = policy(default="allow", max_calls_per_cell=None, max_calls_per_session=None)
    assert evaluate(call(), p, Counters(session=10**9, cell=10**9), 0.0).decision == "allow"


def test_rate_limit_verdict_and_refill() -> None:
    p = policy(default="allow", tools={"t": {"rate": "2/s"}})
    counters = Counters()
    counters.record(call(), p, 0.0)
    counters.record(call(), p, 0.0)
    assert counters.buckets == {"t": (0.0, 0.0)}
    assert evaluate(call(), p, counters, 0.0) == Verdict(
        "deny", "tools.t.rate", "rate limit 2/s reached for 't'", kind="rate_limited", limit=2)
    assert counters.tokens("t", "2/s", 0.5) == 1.0
    assert evaluate(call(), p, counters, 0.5).decision == "allow"
    assert counters.tokens("t", "2/s", 100.0) == 2.0  # capped at the count
    assert Counters().tokens("t", "3/m", 7.0) == 3.0  # a fresh bucket is full
    counters.record(call(), p, 0.5)
    assert counters.buckets["t"] == (0.0, 0.5)


def test_record_counts_exactly() -> None:
    p = policy(default="allow")
    counters = Counters()
    counters.record(call("a"), p, 0.0)
    counters.record(call("a"), p, 0.0)
    counters.record(call("b"), p, 0.0)
    assert (counters.session, counters.cell, counters.per_tool, counters.per_tool_cell, counters.buckets) == \
        (3, 3, {"a": 2, "b": 1}, {"a": 2, "b": 1}, {})
    cell = CellCounts()
    counters.record(call("a"), p, 0.0, cell)
    counters.record(call("a"), p, 0.0, cell)
    assert (cell.calls, cell.per_tool) == (2, {"a": 2})
    assert (counters.session, counters.cell, counters.per_tool, counters.per_tool_cell) == \
        (5, 3, {"a": 4, "b": 1}, {"a": 2, "b": 1})
    assert counters.snapshot("a") == {"session": 5, "cell": 3, "tool_session": 4}
    assert counters.snapshot("z", cell) == {"session": 5, "cell": 2, "tool_session": 0}
    counters.new_cell()
    assert (counters.cell, counters.per_tool_cell) == (0, {})


def test_decisions_exactly() -> None:
    p = policy(tools={"t": {"rules": [{"name": "big", "when": {"properties": {"n": {"minimum": 5}}, "required": ["n"]},
                                        "decision": "approve"},
                                       {"when": {"required": ["x"]}, "decision": "deny"}],
                            "decision": "allow"}})
    assert evaluate(call(n=5), p, Counters(), 0.0) == Verdict(
        "approve", "tools.t.rules[0] (big)", "decision approve by policy rule tools.t.rules[0] (big)", kind="ok")
    assert evaluate(call(x=1), p, Counters(), 0.0) == Verdict(
        "deny", "tools.t.rules[1]", "decision deny by policy rule tools.t.rules[1]", kind="denied")
    assert evaluate(call(n=1), p, Counters(), 0.0) == Verdict(
        "allow", "tools.t.decision", "decision allow by policy rule tools.t.decision", kind="ok")
    src = Call(tool="u", args={}, arg_bytes=0, source_default="allow")
    assert evaluate(src, p, Counters(), 0.0) == Verdict(
        "allow", "tool default for u", "decision allow by policy rule tool default for u", kind="ok")
    assert evaluate(call("u"), p, Counters(), 0.0) == Verdict(
        "deny", "default", "decision deny by policy rule default", kind="denied")
    # a tool entry without a decision falls through to its source default, then the policy's
    q = policy(default="approve", tools={"t": {"rate": "100/s"}})
    assert evaluate(call(), q, Counters(), 0.0).rule == "default"
    tsrc = Call(tool="t", args={}, arg_bytes=0, source_default="deny")
    assert evaluate(tsrc, q, Counters(), 0.0).rule == "tool default for t"


def test_principal_rules() -> None:
    p = policy(default="allow", tools={"t": {"rules": [{"when": {}, "decision": "deny", "principals": ["eve"]}]}})
    eve = Call(tool="t", args={}, arg_bytes=0, principal="eve")
    bob = Call(tool="t", args={}, arg_bytes=0, principal="bob")
    assert evaluate(eve, p, Counters(), 0.0).rule == "tools.t.rules[0]"
    assert evaluate(bob, p, Counters(), 0.0).rule == "default"
    assert evaluate(call(), p, Counters(), 0.0).rule == "default"


def test_exposure_secrets_and_lineage_budgets() -> None:
    p = policy(max_calls_per_session=7, tools={"t": {"expose": "both", "secrets": ["key", "pw"],
                                                     "max_calls_per_session": 3}})
    assert p.exposure("t") == "both"
    assert p.exposure("nope") == "code"
    assert p.secret_args("t") == frozenset({"key", "pw"})
    assert p.secret_args("nope") == frozenset()
    assert lineage_budgets(call("t"), p) == [("session", 7, "max_calls_per_session"),
                                             ("tool:t", 3, "tools.t.max_calls_per_session")]
    assert lineage_budgets(call("u"), p) == [("session", 7, "max_calls_per_session"),
                                             ("tool:u", None, "tools.u.max_calls_per_session")]


def test_parse_rate_and_digest() -> None:
    assert parse_rate(" 2.5 / min ") == (2.5, 60.0)
    assert parse_rate("1/h") == (1.0, 3600.0)
    assert parse_rate("3/s") == (3.0, 1.0)
    a, b = policy(default="allow"), policy(default="deny")
    assert policy_sha256(a) == policy_sha256(policy(default="allow"))
    assert policy_sha256(a) != policy_sha256(b)
    assert len(policy_sha256(a)) == 64


def test_decision_table_rows_exactly() -> None:
    p = policy(tools={"t": {"decision": "allow", "rate": "1/s", "expose": "direct", "secrets": ["k", "j"], "effect": "read",
                            "rules": [{"name": "r", "when": {"required": ["a"]}, "decision": "deny"},
                                      {"when": {"type": "object"}, "decision": "approve", "principals": ["p"]}]},
                      "ghost": {}})
    rows = decision_table(p, ["t", "src"], {"src": "allow"})
    assert rows == [
        {"tool": "ghost", "decision": "deny", "rules": "", "rate": "", "expose": "code", "secrets": "",
         "effect": "write", "known": "NOT A TOOL OF THIS CONFIG"},
        {"tool": "src", "decision": "allow (the tool's default)", "rules": "", "rate": "", "expose": "code",
         "secrets": "", "effect": "write", "known": "yes"},
        {"tool": "t", "decision": "allow",
         "rules": 'r: {"required": ["a"]} -> deny; rules[1]: {"type": "object"} for [\'p\'] -> approve',
         "rate": "1/s", "expose": "direct", "secrets": "k, j", "effect": "read", "known": "yes"},
    ]
    assert decision_table(policy(default="approve"), ["x"]) == [
        {"tool": "x", "decision": "approve", "rules": "", "rate": "", "expose": "code", "secrets": "",
         "effect": "write", "known": "yes"}]
    # What the caller says of each tool's effect (who said it) is shown as it is.
    assert decision_table(policy(), ["x"], effects={"x": "idempotent (the server's hint)"})[0]["effect"] == \
        "idempotent (the server's hint)"


def test_unrequired_constraints_exactly() -> None:
    p = policy(tools={"t": {"rules": [
        {"name": "r", "when": {"properties": {"a": {"maximum": 1}, "b": {}, "c": {}, "d": {}}, "required": ["b"]},
         "decision": "deny"},
        {"when": {"required": ["z"]}, "decision": "deny"}]}})
    schemas = {"t": {"required": ["c"], "properties": {"a": {"default": 5}, "d": "not a dict"}}}
    assert unrequired_constraints(p, schemas) == [
        ("policy.tools.t.rules[0] (r) constrains 'a' but does not require it: the gate fills in the tool's default 5 "
        "before the rule is checked, so a call that leaves it out is decided on that value; add required = [\"a\"] "
        "to its `when` if the rule must only match calls that pass it"),
        ("policy.tools.t.rules[0] (r) constrains 'd' but does not require it: a call that leaves it out matches this "
        "rule, and the tool decides what a missing value means; add required = [\"d\"] to its `when` if the rule "
        "must only match calls that pass it"),
    ]
    q = policy(tools={"u": {"rules": [{"when": {"properties": {"x": {}}}, "decision": "deny"}]}})
    assert unrequired_constraints(q, {}) == [
        ("policy.tools.u.rules[0] constrains 'x' but does not require it: a call that leaves it out matches this "
        "rule, and the tool decides what a missing value means; add required = [\"x\"] to its `when` if the rule "
        "must only match calls that pass it")]
