"""One cell's refused calls, within its budget (``[sandbox] max_refusals_per_cell``).

``RefusalLedger`` keeps them bounded: identical refusals are recorded once and
counted, the budget counts every refusal, and past it nothing more is recorded
but a summary (count, first and last tool) when the cell ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cellgate.gate._json import canonical_json
from cellgate.gate.calls.record import CallRecord

# Error kinds of a call the gate refused before any tool ran.
REFUSED_KINDS = frozenset({"not_found", "invalid", "denied", "budget", "rate_limited"})
# A refused call's arguments are recorded up to this size; beyond it only their size and digest.
REFUSED_ARGS_BYTES = 2048


def is_refusal(record: CallRecord) -> bool:
    return not record.ok and (record.error or {}).get("kind") in REFUSED_KINDS and record.decision != "approved"


@dataclass
class RefusalLedger:
    """One cell's refused calls: counted against its budget, coalesced, summarised past it."""

    budget: int
    count: int = 0
    dropped: int = 0
    first_dropped: str | None = None
    last_dropped: str | None = None
    # (tool, kind, message, args digest) -> [seq of the recorded refusal, repeats not recorded]
    seen: dict[tuple[str, str, str, str], list[int]] = field(default_factory=dict)

    @property
    def exhausted(self) -> bool:
        return self.count >= self.budget

    def note(self, tool: str, record: CallRecord | None = None) -> Literal["record", "coalesced", "dropped"]:
        """Count one refusal; says whether to record it, fold it into an identical one, or drop it."""
        self.count += 1
        if self.count > self.budget:
            self.dropped += 1
            self.first_dropped = self.first_dropped or tool
            self.last_dropped = tool
            return "dropped"
        if record is None:
            return "record"  # journalled elsewhere (a malformed request)
        error = record.error or {}
        key = (record.tool, str(error.get("kind")), str(error.get("message")), record.args_sha256)
        if key in self.seen:
            self.seen[key][1] += 1
            return "coalesced"
        self.seen[key] = [record.seq, 0]
        shrink_args(record)
        return "record"

    def outcome(self, record: CallRecord) -> Literal["record", "coalesced", "dropped"]:
        """Whether to record a served call: a refusal is counted (``note``), anything else recorded."""
        return self.note(record.tool, record) if is_refusal(record) else "record"

    def summary(self) -> list[tuple[str, dict[str, Any]]]:
        """The journal events that close the cell's account of its refusals."""
        events: list[tuple[str, dict[str, Any]]] = [
            ("refusals-coalesced", {"call_seq": seq, "tool": key[0], "repeated": repeats})
            for key, (seq, repeats) in self.seen.items() if repeats]
        if self.dropped:
            events.append(("refusals-dropped", {"count": self.dropped, "first_tool": self.first_dropped,
                                                "last_tool": self.last_dropped, "budget": self.budget}))
        return events


def shrink_args(record: CallRecord) -> None:
    """A refused call's large arguments are kept as their size (the digest is in args_sha256)."""
    size = len(canonical_json(record.args).encode())
    if size > REFUSED_ARGS_BYTES:
        record.args = {"(not recorded)": f"{size} bytes of arguments of a refused call; see args_sha256"}
