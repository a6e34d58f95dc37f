"""The record of one gated call, as the journal and the audit notebook keep it (secrets redacted)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cellgate.gate._json import canonical_json

PREVIEW_CHARS = 200


class Secret(str):
    """A value a tool marks secret: the sandbox gets it, the audit trail only its digest."""

    __slots__ = ()

    def __new__(cls, *args: Any, **kwargs: Any) -> Secret:
        made = super().__new__(cls, *args, **kwargs)
        with _alive_lock:
            _alive[0] += 1
        return made

    def __del__(self) -> None:
        with _alive_lock:
            _alive[0] -= 1


# How many Secrets exist in this process (each counted from its __new__ to its __del__, so never fewer than there
# are): with none, no result can hold one, and a result is not walked for them at all.
_alive = [0]
_alive_lock = threading.Lock()


def secrets_exist() -> bool:
    return _alive[0] > 0


_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})  # exact types: a Secret is a str subclass


def holds_secret(value: Any) -> bool:
    """Whether a ``Secret`` is anywhere in ``value``: a walk that builds nothing (a 1 MB result is mostly scalars)."""
    pending, seen = [value], set[int]()
    while pending:
        item = pending.pop()
        if type(item) in _PLAIN_SCALARS:
            continue
        if isinstance(item, Secret):
            return True
        if isinstance(item, (dict, list, tuple)):
            if id(item) in seen:  # a part shared, or a cycle (which the JSON conversion after this refuses)
                continue
            seen.add(id(item))
            pending.extend(item.values() if isinstance(item, dict) else item)
    return False


def split_secrets(value: Any, found: list[str], digest: Callable[[str], Any]) -> tuple[Any, Any]:
    """(plain value for the sandbox, redacted value for the record); secrets go in found. A value without a
    secret is returned as it is, twice (nothing rebuilt); while no Secret exists at all, without a look."""
    if not secrets_exist() or not holds_secret(value):
        return value, value
    return _split(value, found, digest)


def _split(value: Any, found: list[str], digest: Callable[[str], Any]) -> tuple[Any, Any]:
    if isinstance(value, Secret):
        found.append(str(value))
        return str(value), digest(str(value))
    if isinstance(value, dict):
        pairs = {k: _split(v, found, digest) for k, v in value.items()}
        return {k: p for k, (p, _) in pairs.items()}, {k: r for k, (_, r) in pairs.items()}
    if isinstance(value, (list, tuple)):
        pairs_list = [_split(v, found, digest) for v in value]
        return [p for p, _ in pairs_list], [r for _, r in pairs_list]
    return value, value


@dataclass
class CallRecord:
    """One gated call as the audit notebook lists it (secrets already redacted)."""

    seq: int
    id: str
    tool: str
    args: dict[str, Any]
    started: str
    decision: str = "deny"
    rule: str | None = None
    ok: bool = False
    result: Any = None
    error: dict[str, str] | None = None
    result_sha256: str | None = None
    result_bytes: int | None = None
    duration_ms: float = 0.0
    approval: dict[str, Any] | None = None
    counters: dict[str, int] | None = None
    # What the kernel says about the call (never checked, only recorded as its claim): the cell
    # line and thread that made it, and the text of that line in the host's copy of the program.
    cell_line: int | None = None
    source_line: str | None = None
    thread: str | None = None
    args_sha256: str = ""
    idempotency_key: str | None = None
    trace: dict[str, str] | None = None  # the call's trace and span id, when a session's observer traces it
    # Where the result held a value JSON has no type for, and what the kernel got instead ("result.when: datetime
    # -> str"; ``conversions``): the cell's value is not the tool's, and the record says so.
    converted: list[str] | None = None
    effect: str = "write"  # what the tool does to the world (``calls.effects``)
    ran: bool = False  # the tool was started (a failure after that may have changed the world: ``calls.writes``)
    # A retry's call answered from the record of an earlier attempt's ({"seq", "cell"}), not run (``calls.retry``).
    answered_from: dict[str, Any] | None = None
    result_redacted: bool = False  # the result held a Secret: the record keeps its digest, not the value
    planned: bool = False  # a planning gate's write, not made: the kernel got a placeholder (``calls.plans``)
    # ``result``'s canonical JSON, made once by the gate: what its digest is of and its blob holds (never itself
    # a field of the record: the journal and the notebook hold the value, inline or as the blob).
    result_text: str | None = field(default=None, repr=False, compare=False)

    def recorded_text(self) -> str:
        """The recorded result's canonical JSON (the gate's own, when it made it)."""
        return self.result_text if self.result_text is not None else canonical_json(self.result)

    def as_metadata(self, inline_limit: int) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "seq": self.seq, "id": self.id, "tool": self.tool, "args": self.args, "args_sha256": self.args_sha256,
            "decision": self.decision, "rule": self.rule, "ok": self.ok, "started": self.started,
            "duration_ms": round(self.duration_ms, 3), "effect": self.effect,
        }
        for key in ("approval", "counters", "idempotency_key", "trace", "converted", "answered_from"):
            if getattr(self, key) is not None:
                entry[key] = getattr(self, key)
        if self.ran and not self.ok:
            entry["ran"] = True
        if self.result_redacted:
            entry["result_redacted"] = True
        if self.planned:
            entry["planned"] = True
        claimed = {name: value for name, value in (("line", self.cell_line), ("source_line", self.source_line),
                                                   ("thread", self.thread)) if value is not None}
        if claimed:
            entry["claimed"] = claimed  # reported by the kernel; every view labels it so
        if self.ok:
            entry["result_sha256"] = self.result_sha256
            entry["result_bytes"] = self.result_bytes
            text = self.recorded_text()
            if len(text) <= inline_limit:
                entry["result"] = self.result
            else:
                entry["result_preview"] = text[:PREVIEW_CHARS]
        else:
            entry["error"] = self.error
        return entry


MAX_CONVERSIONS_SAID = 10
_JSON_SCALARS = (str, int, float, bool, type(None))


def conversions(value: Any, converted: Any, where: str = "result") -> list[str]:
    """Each place in ``value`` (a tool's result) that its JSON form ``converted`` holds as another type:
    ``["result.when: datetime -> str", "result.tags: set -> list"]``, at most ``MAX_CONVERSIONS_SAID`` and a count
    of the rest. A dict, list or tuple is walked; anything else converted is said once, not walked into."""
    said: list[str] = []
    more = 0
    pending: list[tuple[str, Any, Any]] = [(where, value, converted)]
    seen: set[int] = set()
    while pending:
        path, item, made = pending.pop()
        if isinstance(item, _JSON_SCALARS):  # a Secret too: a str
            continue
        if isinstance(item, (dict, list, tuple)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, dict) and isinstance(made, dict):
                keys = [k for k in item if not isinstance(k, str)]
                if keys:
                    more += _note(said, f"{path}: {_kinds(keys)} keys -> str")
                children = [(f"{path}.{_short_key(k)}", v, made.get(k if isinstance(k, str) else str(k)))
                            for k, v in item.items()]
            elif isinstance(made, list):
                children = [(f"{path}[{i}]", v, m) for i, (v, m) in enumerate(zip(item, made))]
            else:
                continue
            pending.extend(reversed(children))  # in the result's order
            continue
        more += _note(said, f"{path}: {type(item).__name__} -> {_json_kind(made)}")
    if more:
        said.append(f"and {more} more")
    return said


def _note(said: list[str], line: str) -> int:
    """Add ``line`` while there is room; 1 if it is counted instead."""
    if len(said) < MAX_CONVERSIONS_SAID:
        said.append(line[:200])
        return 0
    return 1


def _kinds(keys: list[Any]) -> str:
    return "/".join(sorted({type(k).__name__ for k in keys}))


def _short_key(key: Any) -> str:
    text = key if isinstance(key, str) else str(key)
    return text if len(text) <= 40 else f"{text[:39]}…"


def _json_kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "str", bool: "bool", int: "int", float: "float"}.get(
        type(value), "null" if value is None else type(value).__name__)
