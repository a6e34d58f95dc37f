"""Plans: a cell's writes listed before any is made, approved once as a set, then applied.

``Session.plan(code)`` runs the cell in a fork of the session whose gate is
**planning**: reads run (the code sees the live world), writes do not. Each
write is decided by the policy as it would be (allow, approve, deny: nobody
is asked) and listed; the cell gets the tool's preview when it has one
(``Tool.preview``), else a placeholder that fails loudly when the code uses
it (``cellgate.kernel.planned``). The plan is approved or denied once,
as one item.

``Session.apply(plan)`` runs the same code in the session for real, its gate
**applying** the plan: a write whose decision is ``approve`` and that matches
a planned write (the same tool and arguments, the first such not yet used)
counts as approved by the plan's approver, and the record says so; a write not
in the plan follows its own policy (asked, or denied: never allowed
silently), and a denied one stays denied. A plan is applied at most once,
only in the session that made it, only while that session has run nothing
since, and only within ``[policy] plan_ttl`` seconds of being made.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from cellgate.gate._errors import SessionError
from cellgate.gate.calls.writes import short_args

State = Literal["pending", "approved", "denied", "applied"]


@dataclass(frozen=True)
class PlannedWrite:
    """One write a plan holds: what it would do and what the policy would decide of it."""

    tool: str
    args: dict[str, Any]
    args_sha256: str
    decision: str  # "allow", "approve" or "deny" (the policy's verdict, nobody asked)
    rule: str | None = None

    def line(self) -> str:
        return f"{self.tool}({short_args(self.args)}) [{self.decision}]"

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": self.args, "args_sha256": self.args_sha256, "decision": self.decision,
                "rule": self.rule}


class Planning:
    """A planning gate's list of the writes it did not make (``Dispatcher.planning``)."""

    def __init__(self) -> None:
        self.writes: list[PlannedWrite] = []

    def add(self, write: PlannedWrite) -> int:
        """List ``write``; its number in the plan (1 first)."""
        self.writes.append(write)
        return len(self.writes)


@dataclass
class Plan:
    """A cell's writes, waiting for one approval (``approve``/``deny``), then ``Session.apply``."""

    code: str
    writes: list[PlannedWrite]
    output: str  # what the planned cell showed (its writes answered by previews or placeholders)
    status: str  # the planned cell's status
    mark: int  # how many cells the session's record held when the plan was made
    ttl: float  # seconds it may be applied for ([policy] plan_ttl)
    owner: str = ""  # the record of the session that made it: the only one that may apply it
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    made: float = field(default_factory=time.monotonic)
    state: State = "pending"
    approver: str | None = None
    reason: str = ""

    @property
    def counts(self) -> dict[str, int]:
        """How many writes of each tool it holds."""
        return dict(Counter(write.tool for write in self.writes))

    @property
    def refused(self) -> list[PlannedWrite]:
        """Its writes the policy denies: applying the plan does not make them."""
        return [write for write in self.writes if write.decision == "deny"]

    def approve(self, by: str = "the caller", reason: str = "") -> None:
        """Approve every write of the plan at once (``by``: who, as the record says)."""
        self._answer("approved", by, reason)

    def deny(self, by: str = "the caller", reason: str = "") -> None:
        self._answer("denied", by, reason)

    def _answer(self, state: State, by: str, reason: str) -> None:
        if self.state != "pending":
            raise SessionError(f"plan {self.id} was {self.state} already; make a new plan (Session.plan)")
        self.state, self.approver, self.reason = state, str(by)[:200], str(reason)[:500]

    def table(self) -> str:
        """The plan as a person reads it before answering: each write with its decision, and the counts."""
        counts = ", ".join(f"{n} {tool}" for tool, n in sorted(self.counts.items())) or "no writes"
        lines = [f"plan {self.id}: {len(self.writes)} write{'s' if len(self.writes) != 1 else ''} ({counts})"]
        lines += [f"  {n:>3}. {write.line()}" for n, write in enumerate(self.writes, 1)]
        if self.refused:
            lines.append(f"  {len(self.refused)} of them the policy denies: applying the plan does not make them")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "status": self.status, "counts": self.counts,
                "writes": [write.as_dict() for write in self.writes], "output": self.output}

    def checked_for_apply(self, cells_since: int) -> None:
        """SessionError unless the plan may be applied now (``cells_since``: cells the session ran since)."""
        if self.state == "applied":
            raise SessionError(f"plan {self.id} was applied already; a plan is applied once: make a new one")
        if self.state != "approved":
            raise SessionError(f"plan {self.id} is {self.state}, not approved; approve it (plan.approve()) first"
                               if self.state == "pending" else f"plan {self.id} was denied; it is not applied")
        if cells_since:
            raise SessionError(f"plan {self.id} is stale: the session ran {cells_since} cell"
                               f"{'s' if cells_since != 1 else ''} since it was made, so its reads may have "
                               "changed; make a new plan")
        age = time.monotonic() - self.made
        if age > self.ttl:
            raise SessionError(f"plan {self.id} is stale: it was made {age:.0f} s ago, over [policy] plan_ttl "
                               f"({self.ttl:g} s); make a new plan")


class Applying:
    """An applying gate's plan (``Dispatcher.applying``): each planned write approves one matching call."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._used = [False] * len(plan.writes)

    def match(self, tool: str, args_sha256: str) -> int | None:
        """The number (1 first) of the first unused planned write equal to this call, now used; None if none."""
        for index, write in enumerate(self.plan.writes):
            if not self._used[index] and write.tool == tool and write.args_sha256 == args_sha256:
                self._used[index] = True
                return index + 1
        return None
