"""What a cell's writes did, as its caller is told: committed, failed, or of unknown outcome.

A cell that fails after some of its writes leaves the world changed; the
caller (a model, a person, a program) has to know which changes happened
before it tries again. ``Writes.of`` reads a cell's recorded calls (the
notebook's entries, so a record read back after a crash says the same) and
sorts each write by what is known of it:

- **committed**: the tool returned a result (or a retry answered it from
  the record of an earlier attempt: ``answered``);
- **failed**: refused before it ran (policy, schema, budget) or the tool
  raised: nothing is known to have changed;
- **unknown**: it ran and no outcome is known: its deadline passed, the
  source died mid-call, or the host stopped before the outcome was recorded.

Reads (``calls.effects``) are counted, not listed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Outcome = Literal["committed", "answered", "failed", "unknown"]
SHORT_ARGS = 120
LISTED = 20  # writes listed per outcome in a text summary; the rest counted
# The error kinds after which a call that ran may or may not have taken effect (its deadline passed, its source died).
UNKNOWN_KINDS = frozenset({"timeout", "unavailable"})


def outcome(call: dict[str, Any]) -> Outcome | None:
    """What is known of a recorded call's effect on the world; None for a read."""
    if call.get("effect") == "read":
        return None
    if call.get("ok") is True:
        return "answered" if isinstance(call.get("answered_from"), dict) else "committed"
    if call.get("outcome") in ("unknown", "needs-reconciliation", "started"):
        return "unknown"
    error = call.get("error")
    kind = error.get("kind") if isinstance(error, dict) else None  # a record read back: any type at all
    kind = kind if isinstance(kind, str) else None
    if kind in ("unknown", "outcome_unknown"):  # the host stopped mid-call; a retry that would not rerun it
        return "unknown"
    return "unknown" if kind in UNKNOWN_KINDS and call.get("ran") is True else "failed"


def call_order(call: dict[str, Any]) -> int:
    """A recorded call's place in its session (its seq; a malformed one first)."""
    seq = call.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


def short_args(args: Any, limit: int = SHORT_ARGS) -> str:
    """``title='t3', n=2``: a call's arguments in one short line."""
    if not isinstance(args, dict):
        return ""
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in args.items())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def result_id(result: Any) -> str | None:
    """The id a result names for what it made (its ``id``), when it has one."""
    if isinstance(result, dict):
        value = result.get("id")
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)[:80]
    return None


@dataclass(frozen=True)
class Write:
    """One write of a cell, as its caller is told it."""

    seq: int
    tool: str
    args: dict[str, Any]
    outcome: Outcome
    result_id: str | None = None
    error: str | None = None
    answered_from: int | None = None  # the earlier attempt's call (seq) a retry answered this one from

    def line(self) -> str:
        text = f"#{self.seq} {self.tool}({short_args(self.args)})"
        if self.result_id is not None:
            text += f" -> id {self.result_id}"
        if self.answered_from is not None:
            text += f" (answered from the record of call #{self.answered_from}; not run again)"
        if self.error:
            text += f": {self.error[:160]}"
        return text

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"seq": self.seq, "tool": self.tool, "args": self.args, "outcome": self.outcome}
        for name in ("result_id", "error", "answered_from"):
            if getattr(self, name) is not None:
                entry[name] = getattr(self, name)
        return entry


@dataclass(frozen=True)
class Writes:
    """A cell's writes by outcome, and how many reads it made."""

    committed: tuple[Write, ...] = ()
    answered: tuple[Write, ...] = ()
    failed: tuple[Write, ...] = ()
    unknown: tuple[Write, ...] = ()
    reads: int = 0

    @classmethod
    def of(cls, calls: Iterable[dict[str, Any]]) -> Writes:
        """The writes of a cell's recorded calls (its notebook entries, in any order)."""
        sorted_out: dict[Outcome, list[Write]] = {"committed": [], "answered": [], "failed": [], "unknown": []}
        reads = 0
        for call in sorted(calls, key=call_order):
            kind = outcome(call)
            if kind is None:
                reads += 1
                continue
            error = call.get("error") if isinstance(call.get("error"), dict) else None
            answered = call.get("answered_from")
            sorted_out[kind].append(Write(
                seq=call_order(call), tool=str(call.get("tool")),
                args=call["args"] if isinstance(call.get("args"), dict) else {}, outcome=kind,
                result_id=result_id(call.get("result")) if kind in ("committed", "answered") else None,
                error=str(error.get("message"))[:300] if error else None,
                answered_from=int(answered["seq"]) if isinstance(answered, dict)
                and isinstance(answered.get("seq"), int) else None))
        return cls(committed=tuple(sorted_out["committed"]), answered=tuple(sorted_out["answered"]),
                   failed=tuple(sorted_out["failed"]), unknown=tuple(sorted_out["unknown"]), reads=reads)

    def __bool__(self) -> bool:
        return bool(self.committed or self.answered or self.failed or self.unknown)

    @property
    def done(self) -> tuple[Write, ...]:
        """Every write whose change is in the world: made now, or by an earlier attempt and answered."""
        return self.committed + self.answered

    def as_dict(self) -> dict[str, Any]:
        """For structured results (MCP ``structuredContent``, JSON output)."""
        return {"committed": [w.as_dict() for w in self.committed], "answered": [w.as_dict() for w in self.answered],
                "failed": [w.as_dict() for w in self.failed], "unknown": [w.as_dict() for w in self.unknown],
                "reads": self.reads}

    def summary(self, failed_cell: bool, retry_hint: str = "execute again with retry=True") -> str:
        """What a caller reads after the cell: counts, each write by outcome, and (for a failed cell) how to retry
        without repeating what is done. Empty when the cell made no write."""
        if not self:
            return ""
        counts = [f"{len(ws)} {name}" for name, ws in (("committed", self.committed),
                                                        ("answered from the record", self.answered),
                                                        ("failed", self.failed), ("unknown", self.unknown)) if ws]
        lines = [f"Writes: {', '.join(counts)}; {self.reads} read{'s' if self.reads != 1 else ''}."]
        for title, writes in (("committed (done in the world)", self.committed),
                              ("answered from the record (done by an earlier attempt)", self.answered),
                              ("unknown outcome (may or may not have happened)", self.unknown),
                              ("failed (not done)", self.failed)):
            if writes:
                lines.append(f"{title}:")
                lines += [f"  {w.line()}" for w in writes[:LISTED]]
                if len(writes) > LISTED:
                    lines.append(f"  and {len(writes) - LISTED} more")
        if failed_cell and (self.done or self.unknown):
            lines.append(f"To finish the work, fix the code and {retry_hint}: each write that equals one done "
                         "above (same tool and arguments, in order) is answered from the record instead of being "
                         "made again; a write of unknown outcome reruns with the same idempotency key, or raises "
                         "OutcomeUnknown; reads run again. A plain re-run repeats every write.")
        return "\n".join(lines)
