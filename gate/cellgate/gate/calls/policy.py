"""Policy: which tool calls may run, decided by a pure function.

``evaluate(call, policy, counters, now)`` looks only at its arguments: the
call (tool and arguments), the parsed ``[policy]`` of cellgate.toml, the
session's counters and the host clock. It is unit-tested without a kernel.
``Counters.record`` then applies an allowed call to the budgets and buckets.

Order of checks: argument size, budgets (per cell, per session, per tool),
rate limit, then the decision: the first rule of the tool whose ``when``
JSON Schema matches the arguments, else the tool's decision, else the
tool's default (from its source, e.g. an MCP annotation), else
``policy.default`` (deny).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from cellgate.gate._json import digest
from cellgate.gate._model import StrictModel

Decision = Literal["allow", "deny", "approve"]
Expose = Literal["code", "direct", "both"]
RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PER = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}


def parse_rate(text: str) -> tuple[float, float]:
    """'20/s' -> (20 calls, per 1.0 seconds)."""
    match = RATE.match(text)
    if not match:
        raise ValueError(f"rate {text!r} must look like '20/s', '100/min' or '500/hour'")
    count = float(match.group(1))
    if count <= 0:
        raise ValueError(f"rate {text!r} must allow at least one call")
    return count, _PER[match.group(2)]


class Rule(StrictModel):
    name: str | None = None
    when: dict[str, Any] = Field(description="JSON Schema matched against the call's arguments")
    decision: Decision
    # Only for the sessions of these principals (cellgate mcp serve's [mcp.auth]); left out of the recorded policy
    # and its digest when absent, so a policy that names none records as it always did.
    principals: list[str] | None = Field(default=None, exclude_if=lambda value: value is None)

    @functools.cached_property
    def _validator(self) -> Any:
        """``when`` compiled once, on the rule's first call (a cached property: not a field, nor in equality)."""
        import jsonschema  # at use (see _schema)

        return jsonschema.Draft202012Validator(self.when)

    def matches(self, args: dict[str, Any]) -> bool:
        """Whether a call's arguments match ``when``."""
        return bool(self._validator.is_valid(args))

    @field_validator("when")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        # jsonschema is imported at use: importing it takes ~2 s where rfc3987_syntax is installed (it compiles a
        # grammar at import), and `cellgate policy check` or a policy without rules never needs it.
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"'when' is not a valid JSON Schema: {exc.message}") from None
        unknown = sorted(set(_unknown_keywords(value)))
        if unknown:  # JSON Schema ignores a keyword it does not define: such a rule would match every call
            raise ValueError(f"'when' uses {', '.join(map(repr, unknown))}, which JSON Schema does not define, so the "
                             "rule would match every call; write the condition in JSON Schema, e.g. when = "
                             "{ properties = { path = { const = \"/tmp/safe\" } }, required = [\"path\"] }")
        return value


KEYWORDS = frozenset((
    "$schema $id $ref $defs $anchor $dynamicRef $dynamicAnchor $vocabulary $comment definitions "
    "type enum const multipleOf maximum exclusiveMaximum minimum exclusiveMinimum maxLength minLength pattern "
    "maxItems minItems uniqueItems maxContains minContains maxProperties minProperties required dependentRequired "
    "allOf anyOf oneOf not if then else dependentSchemas dependencies prefixItems items contains properties "
    "patternProperties additionalProperties propertyNames unevaluatedItems unevaluatedProperties format title "
    "description default deprecated readOnly writeOnly examples contentEncoding contentMediaType contentSchema"
).split())
_ONE = ("not", "if", "then", "else", "items", "contains", "additionalProperties", "propertyNames", "unevaluatedItems",
        "unevaluatedProperties", "contentSchema")
_LISTED = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _unknown_keywords(schema: Any) -> Iterator[str]:
    """The keywords of ``schema`` and its subschemas that JSON Schema (2020-12, and draft 7's spellings) lacks."""
    if not isinstance(schema, dict):
        return
    yield from (key for key in schema if key not in KEYWORDS)
    for key in _ONE:
        yield from _unknown_keywords(schema.get(key))
    for key in _LISTED:
        for sub in schema.get(key) or []:
            yield from _unknown_keywords(sub)
    for key in _NAMED:
        named = schema.get(key)
        for sub in named.values() if isinstance(named, dict) else []:
            yield from _unknown_keywords(sub)


class ToolPolicy(StrictModel):
    decision: Decision | None = None
    rules: list[Rule] = Field(default_factory=list)
    rate: str | None = None
    max_calls_per_session: int | None = Field(default=None, ge=0)
    max_calls_per_cell: int | None = Field(default=None, ge=0)
    max_concurrency: int = Field(default=8, ge=1, le=256)
    max_queue_wait: float | None = Field(default=None, gt=0, description="seconds a call may wait for one of the "
                                         "tool's max_concurrency slots (default: [policy] max_queue_wait)")
    expose: Expose = "code"
    secrets: list[str] = Field(default_factory=list)
    # What the tool does to the world (``calls.effects``); None: what its code or server says, else "write".
    # (Left out of the policy's digest while unset: a policy written before effects keeps its digest.)
    effect: Literal["read", "write", "idempotent"] | None = Field(default=None, exclude_if=lambda value: value is None)

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)
        return value


class Policy(StrictModel):
    default: Decision = "deny"
    max_calls_per_cell: int | None = Field(default=10_000, ge=0)
    max_calls_per_session: int | None = Field(default=100_000, ge=0)
    max_arg_bytes: int = Field(default=256 * 1024, ge=1)
    max_result_bytes: int = Field(default=16 << 20, ge=1)
    approver: str = "deny"
    approval_timeout: float = Field(default=300.0, gt=0)
    max_queue_wait: float = Field(default=300.0, gt=0, description="seconds a call may wait for a free slot (its "
                                  "tool's max_concurrency, the gate's tool threads) before it fails as busy, not run; "
                                  "a call's own deadline ([sandbox] call_timeout) starts when it runs")
    # Seconds a plan may be applied after it was made (``calls.plans``); left out of the digest at its default,
    # so a policy written before plans keeps its digest.
    plan_ttl: float = Field(default=600.0, gt=0, exclude_if=lambda value: value == 600.0)
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rule_names(self) -> Policy:
        for tool, entry in self.tools.items():
            names = [r.name for r in entry.rules if r.name]
            if len(names) != len(set(names)):
                raise ValueError(f"tools.{tool}.rules: rule names must be unique")
        return self

    def for_tool(self, tool: str) -> ToolPolicy | None:
        return self.tools.get(tool)

    def exposure(self, tool: str) -> Expose:
        """How the model may reach a tool: from code, as a direct tool on its own turn, or both."""
        entry = self.tools.get(tool)
        return entry.expose if entry else "code"

    def effect(self, tool: str) -> str | None:
        """The effect ``[policy.tools.<tool>] effect`` says, or None."""
        entry = self.tools.get(tool)
        return entry.effect if entry else None

    def secret_args(self, tool: str) -> frozenset[str]:
        entry = self.tools.get(tool)
        return frozenset(entry.secrets) if entry else frozenset()


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]
    arg_bytes: int
    # What the tool's source says when the policy is silent (e.g. MCP readOnlyHint -> allow).
    source_default: Decision | None = None
    principal: str | None = None  # whom the session acts for (Session.claim), for rules naming principals
    source_rule: str | None = None  # what decided the source's default, when not the source itself (a network rule)


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    rule: str  # which part of the policy decided, e.g. "tools.create_task.rules[0]"
    reason: str
    kind: Literal["ok", "denied", "budget", "rate_limited", "invalid"] = "ok"
    limit: int | float | None = None
    count: int | None = None


@dataclass
class CellCounts:
    """One cell's calls, for the per-cell budgets: each running cell has its own (kernel subshells run cells
    side by side), passed as ``cell`` to ``evaluate`` and ``Counters.record``."""

    calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)


@dataclass
class Counters:
    """Per-session state the policy reads: call counts and rate buckets (and the current cell's counts, unless
    a cell brings its own ``CellCounts``)."""

    session: int = 0
    cell: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    per_tool_cell: dict[str, int] = field(default_factory=dict)
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # tool -> (tokens, at)

    def new_cell(self) -> None:
        self.cell = 0
        self.per_tool_cell.clear()

    def tokens(self, tool: str, rate: str, now: float) -> float:
        count, period = parse_rate(rate)
        tokens, at = self.buckets.get(tool, (count, now))
        return min(count, tokens + (now - at) * count / period)

    def record(self, call: Call, policy: Policy, now: float, cell: CellCounts | None = None) -> None:
        """Count a call the gate is about to run (in ``cell``'s counts when given)."""
        self.session += 1
        self.per_tool[call.tool] = self.per_tool.get(call.tool, 0) + 1
        if cell is None:
            self.cell += 1
            self.per_tool_cell[call.tool] = self.per_tool_cell.get(call.tool, 0) + 1
        else:
            cell.calls += 1
            cell.per_tool[call.tool] = cell.per_tool.get(call.tool, 0) + 1
        entry = policy.for_tool(call.tool)
        if entry and entry.rate:
            self.buckets[call.tool] = (self.tokens(call.tool, entry.rate, now) - 1, now)

    def snapshot(self, tool: str, cell: CellCounts | None = None) -> dict[str, int]:
        return {"session": self.session, "cell": self.cell if cell is None else cell.calls,
                "tool_session": self.per_tool.get(tool, 0)}


def lineage_budgets(call: Call, policy: Policy) -> list[tuple[str, int | None, str]]:
    """The session budgets a call spends, as ``Lineage.take_all`` counts them for a session's whole lineage
    (its forks, trials, pool members and resumes): (name in the ledger, limit, the rule that sets it)."""
    entry = policy.for_tool(call.tool)
    return [("session", policy.max_calls_per_session, "max_calls_per_session"),
            (f"tool:{call.tool}", entry.max_calls_per_session if entry else None,
             f"tools.{call.tool}.max_calls_per_session")]


def _budget(limit: int | None, count: int, rule: str, what: str) -> Verdict | None:
    if limit is not None and count >= limit:
        return Verdict("deny", rule, f"{what} budget of {limit} calls is used up ({count} made)",
                       kind="budget", limit=limit, count=count)
    return None


def evaluate(call: Call, policy: Policy, counters: Counters, now: float, cell: CellCounts | None = None) -> Verdict:
    """Decide one call (per-cell budgets against ``cell`` when given). Pure: reads its arguments, changes nothing."""
    cell_calls, per_tool_cell = ((counters.cell, counters.per_tool_cell) if cell is None
                                 else (cell.calls, cell.per_tool))
    if call.arg_bytes > policy.max_arg_bytes:
        return Verdict("deny", "max_arg_bytes",
                       f"arguments of {call.arg_bytes} bytes exceed the {policy.max_arg_bytes} byte limit",
                       kind="invalid", limit=policy.max_arg_bytes, count=call.arg_bytes)
    entry = policy.for_tool(call.tool)
    checks = [
        _budget(policy.max_calls_per_cell, cell_calls, "max_calls_per_cell", "per-cell"),
        _budget(policy.max_calls_per_session, counters.session, "max_calls_per_session", "per-session"),
    ]
    if entry is not None:
        checks += [
            _budget(entry.max_calls_per_session, counters.per_tool.get(call.tool, 0),
                    f"tools.{call.tool}.max_calls_per_session", f"{call.tool!r} per-session"),
            _budget(entry.max_calls_per_cell, per_tool_cell.get(call.tool, 0),
                    f"tools.{call.tool}.max_calls_per_cell", f"{call.tool!r} per-cell"),
        ]
    for verdict in checks:
        if verdict is not None:
            return verdict
    if entry is not None and entry.rate:
        if counters.tokens(call.tool, entry.rate, now) < 1:
            return Verdict("deny", f"tools.{call.tool}.rate", f"rate limit {entry.rate} reached for {call.tool!r}",
                           kind="rate_limited", limit=parse_rate(entry.rate)[0])
    if entry is not None:
        for index, rule in enumerate(entry.rules):
            if (rule.principals is None or call.principal in rule.principals) and rule.matches(call.args):
                label = f"tools.{call.tool}.rules[{index}]" + (f" ({rule.name})" if rule.name else "")
                return _decided(rule.decision, label)
        if entry.decision is not None:
            return _decided(entry.decision, f"tools.{call.tool}.decision")
    if call.source_default is not None:
        return _decided(call.source_default, call.source_rule or f"tool default for {call.tool}")
    return _decided(policy.default, "default")


def _decided(decision: Decision, rule: str) -> Verdict:
    kind: Literal["ok", "denied"] = "denied" if decision == "deny" else "ok"
    return Verdict(decision, rule, f"decision {decision} by policy rule {rule}", kind=kind)


def policy_sha256(policy: Policy) -> str:
    return digest(policy.model_dump(mode="json"))


def decision_table(policy: Policy, tools: list[str], source_defaults: dict[str, Decision] | None = None,
                   effects: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The effective decision of each tool, for `cellgate policy check` (``effects``: each tool's effect and who
    said it, ``calls.effects``; else the policy's, or "write")."""
    rows = []
    for tool in sorted(set(tools) | set(policy.tools)):
        entry = policy.for_tool(tool)
        named = entry.decision if entry and entry.decision else None
        from_source = (source_defaults or {}).get(tool)
        base = named or (f"{from_source} (the tool's default)" if from_source else None) or policy.default
        rules = "; ".join(f"{r.name or f'rules[{i}]'}: {json.dumps(r.when, sort_keys=True)}"
                          f"{f' for {r.principals}' if r.principals is not None else ''} -> {r.decision}"
                          for i, r in enumerate(entry.rules)) if entry else ""
        rows.append({
            "tool": tool, "decision": base, "rules": rules,
            "rate": (entry.rate or "") if entry else "",
            "expose": entry.expose if entry else "code",
            "secrets": ", ".join(entry.secrets) if entry else "",
            "effect": (effects or {}).get(tool) or (entry.effect if entry and entry.effect else "write"),
            "known": "yes" if tool in tools else "NOT A TOOL OF THIS CONFIG",
        })
    return rows


def unrequired_constraints(policy: Policy, schemas: dict[str, dict[str, Any]]) -> list[str]:
    """Warnings for rules that constrain an argument a call may leave out (`cellgate policy check`).

    ``when: {properties: {amount: {maximum: 100}}}`` without ``required``
    matches a call that omits ``amount``. The gate fills the tool's schema
    defaults before it evaluates rules, so such a call is matched against the
    default; an argument with neither a default nor ``required`` in the tool's
    schema is simply absent, and the rule matches whatever the tool then does.
    """
    warnings = []
    for tool, entry in sorted(policy.tools.items()):
        schema = schemas.get(tool) or {}
        tool_required = set(schema.get("required") or [])
        declared = schema.get("properties") or {}
        for index, rule in enumerate(entry.rules):
            constrained = rule.when.get("properties")
            if not isinstance(constrained, dict):
                continue
            required = set(rule.when.get("required") or [])
            label = f"policy.tools.{tool}.rules[{index}]" + (f" ({rule.name})" if rule.name else "")
            for name in sorted(set(constrained) - required - tool_required):
                declared_prop = declared.get(name)
                prop = declared_prop if isinstance(declared_prop, dict) else {}
                if "default" in prop:
                    then = (f"the gate fills in the tool's default {json.dumps(prop['default'])} before the rule "
                            "is checked, so a call that leaves it out is decided on that value")
                else:
                    then = "a call that leaves it out matches this rule, and the tool decides what a missing value means"
                warnings.append(f"{label} constrains {name!r} but does not require it: {then}; add "
                                f"required = [{json.dumps(name)}] to its `when` if the rule must only match calls "
                                "that pass it")
    return warnings
