"""A retry of a failed cell: stable idempotency keys, and the record of what its earlier attempts already did.

A cell sent with ``retry`` (``Session.execute(code, retry=True)``, the
``retry`` input of ``execute_python`` and of the MCP execute tool, or the
execute_request metadata ``{"cellgate": {"retry": true}}`` from any
frontend) continues the **chain** of the session's last failed cell: its
first attempt and every retry since.

Each call's idempotency key is derived from the lineage (``calls.lineage``:
the session with its forks, trials and resumes), the chain, the tool, the
digest of its arguments and its occurrence (the n-th call of that tool with
those arguments in the attempt). So the same call in a retry, in a resumed
session or after a gate restart (the journal read back) has the same key, and
a deliberate repeat (another cell, or a second identical call in the cell)
another one. A tool that takes a keyword-only ``idempotency_key`` gets it.

What a retry does with a call, by the call's effect (``calls.effects``) and
what the chain's record says of the call with the same key:

============  ===================  ================================  =================
effect        committed before     unknown before                    anything else
============  ===================  ================================  =================
read          runs                 runs                              runs
write         answered (not run)   runs with the same key if the     runs
                                   tool takes one, else
                                   ``OutcomeUnknown``
idempotent    answered (not run)   runs with the same key            runs
============  ===================  ================================  =================
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # the string spelling json.dumps uses with ensure_ascii=False
from typing import Any, Literal

from cellgate.gate._json import canonical_json, sha256_hex
from cellgate.gate.calls.writes import call_order, outcome

KEY_PREFIX = "cg1-"
Known = Literal["committed", "unknown"]


def idempotency_key(lineage: str, chain: str, tool: str, args_sha256: str, occurrence: int) -> str:
    """The public contract: equal for the same call across retries, resumes and gate restarts."""
    if (type(lineage) is str and type(chain) is str and type(tool) is str and type(args_sha256) is str
            and type(occurrence) is int):
        # canonical_json's very text of this list, spelled directly: every gated call derives a key, and building
        # json.dumps's encoder was two thirds of the key's cost (~2 of 3 us a call).
        text = (f"[{encode_basestring(lineage)},{encode_basestring(chain)},{encode_basestring(tool)},"
                f"{encode_basestring(args_sha256)},{occurrence}]")
    else:
        text = canonical_json([lineage, chain, tool, args_sha256, occurrence])
    return KEY_PREFIX + sha256_hex(text.encode())[:40]


@dataclass(frozen=True)
class Recorded:
    """What the chain's record says of one key: the call that holds its outcome."""

    known: Known
    call: dict[str, Any]  # the call's entry as the notebook lists it
    cell: str  # the msg_id of the attempt that made it


def remembered(attempts: Iterable[tuple[str, Iterable[dict[str, Any]]]]) -> dict[str, Recorded]:
    """Each write key of a chain's attempts (``(msg_id, calls)`` in order) and what is known of it: a key once
    committed stays so (later attempts answer it); one of unknown outcome is unknown until a later attempt's run
    settles it (committed, or failed: then it is forgotten, and the next retry runs it)."""
    known: dict[str, Recorded] = {}
    for cell, calls in attempts:
        for call in sorted(calls, key=call_order):
            key, kind = call.get("idempotency_key"), outcome(call)
            if not isinstance(key, str) or kind is None:
                continue
            before = known.get(key)
            if before is not None and before.known == "committed":
                continue
            if kind == "committed":
                known[key] = Recorded("committed", call, cell)
            elif kind == "unknown" and before is None:
                known[key] = Recorded("unknown", call, cell)
            elif kind == "failed" and call.get("ran") is True:  # it ran and failed: nothing to remember
                known.pop(key, None)
    return known


@dataclass
class CellWrites:
    """One running cell's keys and, for a retry, its chain's record (the dispatcher's memory of the world)."""

    chain: str  # the msg_id of the chain's first attempt (this cell's own, when it is no retry)
    record: dict[str, Recorded] = field(default_factory=dict)
    retry: bool = False
    # Reads a recorded result the notebook keeps as a blob (checked against its digest).
    load: Callable[[dict[str, Any]], Any] = field(default=lambda call: call.get("result"))
    _seen: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)

    def key(self, lineage: str, tool: str, args_sha256: str) -> str:
        """The next call's key (counting its occurrence in this attempt)."""
        seen = (tool, args_sha256)
        occurrence = self._seen[seen]
        self._seen[seen] = occurrence + 1
        return idempotency_key(lineage, self.chain, tool, args_sha256, occurrence)

    def recorded(self, key: str) -> Recorded | None:
        return self.record.get(key) if self.retry else None


def last_failed(cells: Iterable[Any]) -> Any | None:
    """The session's last program cell (``CellRecord``), when it failed; None when it succeeded or there is none."""
    last = None
    for cell in cells:
        if cell.kind == "code" and not cell.silent:
            last = cell
    return last if last is not None and last.status not in (None, "ok", "rejected") else None


def chain_of(cell: Any) -> str:
    """The chain a cell belongs to: the first attempt's msg_id."""
    root = cell.extra.get("retry_of") if isinstance(cell.extra, dict) else None
    return root if isinstance(root, str) else str(cell.msg_id)


def attempts(cells: Iterable[Any], chain: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The calls of each attempt of ``chain`` (those still in flight as of unknown outcome), in order."""
    found = []
    for cell in cells:
        if cell.kind == "code" and chain_of(cell) == chain:
            pending = [dict(call, outcome="unknown") for call in cell.pending_calls.values()]
            found.append((str(cell.msg_id), [*cell.calls, *pending]))
    return found
