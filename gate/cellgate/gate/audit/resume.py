"""A session's record continued by a new host process.

A frontend that restarts a kernelspec kernel ends the kernel's process and
starts another (``session.launcher``). The new process continues the same
audit notebook: it reads the journal back (every hash, the chain and every
MAC under this host's key), feeds it to its recorder, says how the last
process ended (``recovered`` if it stopped without ending the record, as
``cellgate recover`` does) and records the restart, so the notebook reads
as one session with a "kernel restarted" note where it happened.

Only a record made with the same tools, policy and sandbox settings is
continued: otherwise its metadata would no longer describe the session, and
the caller starts a new notebook that names the previous one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import JournalError
from cellgate.gate.audit.journal import Journal, read_journal
from cellgate.gate.audit.recorder import Recorder, journal_path

ENDINGS = ("session-ended", "recovered", "session-paused")
R = TypeVar("R", bound=Recorder)
# What must not change for a record to describe the continued session.
SETUP = (("tools", "manifest_sha256"), ("policy", "sha256"), ("sandbox",), ("frontend",))


@dataclass(frozen=True)
class Previous:
    """A record to continue: its notebook and its journal's records, read back and checked."""

    notebook: Path
    records: list[dict[str, Any]]

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.records[0]["metadata"])

    @property
    def ended(self) -> bool:
        return self.records[-1]["event"] in ENDINGS

    @property
    def next_call_seq(self) -> int:
        """The gate numbers calls per session: the continued session goes on from the last one."""
        seqs = [int(r["call"]["seq"]) for r in self.records if r["event"] == "call-started"]
        return max(seqs, default=0) + 1


def read_previous(notebook: Path) -> Previous:
    """The record of ``notebook``; JournalError saying why it cannot be continued."""
    journal = journal_path(notebook)
    try:
        found = read_journal(journal, hostkey.load(create=False))
    except (OSError, ValueError) as exc:  # ConfigError (no host key, not a regular file) is a ValueError
        raise JournalError(f"{journal} cannot be read: {exc}") from None
    if found.problem:
        raise JournalError(f"{journal}: {found.problem}")
    if not found.records or found.records[0]["event"] != "session-started":
        raise JournalError(f"{journal} does not start with a session-started record")
    return Previous(notebook, found.records)


def setup_changes(previous: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Which parts of the session's setup differ between two records' metadata, each said as a person reads it:
    ``tools (the record's: add, echo; now: echo)``, ``policy (max_calls_per_session: 100 -> 5)``."""
    changed = []
    for path in SETUP:
        if _at(previous, path) != _at(current, path):
            part = path[0]
            before, after = _at(previous, (part,)), _at(current, (part,))
            said = _tools_change(before, after) if part == "tools" else _keys_change(part, before, after)
            changed.append(f"{part} ({said})" if said else ".".join(path))
    return changed


def _at(metadata: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        metadata = metadata.get(part) if isinstance(metadata, dict) else None
    return metadata


def _names(value: Any, key: str) -> str:
    """The record's tool names (``manifest``) or sources, as one short list."""
    found = value.get(key) if isinstance(value, dict) else None
    entries = found if isinstance(found, list) else []
    names = [str(e.get("name")) if isinstance(e, dict) else str(e) for e in entries]
    return _short(", ".join(sorted(names) if key == "manifest" else names) or "none")


def _tools_change(before: Any, after: Any) -> str:
    said = [f"the record's: {_names(before, 'manifest')}; now: {_names(after, 'manifest')}"]
    if _names(before, "manifest") == _names(after, "manifest"):  # the same names: which tools' signatures differ
        old, new = ({str(e.get("name")): e for e in _at(v, ("manifest",)) or [] if isinstance(e, dict)}
                    for v in (before, after))
        differ = sorted(name for name in old if old[name] != new.get(name))
        said = [f"{_short(', '.join(differ))}: another description, parameters or result"] if differ else []
    if _at(before, ("sources",)) != _at(after, ("sources",)):
        said.append(f"from the record's sources: {_names(before, 'sources')}; now: {_names(after, 'sources')}")
    return "; ".join(said)


def _keys_change(part: str, before: Any, after: Any) -> str:
    """The keys that differ, each with its value in the record and now (the policy's: under its ``policy``)."""
    if part == "policy":
        before, after = _at(before, ("policy",)), _at(after, ("policy",))
    differ = _differences(before, after, "")
    said = [f"{key or part}: {_value(old)} -> {_value(new)}" for key, old, new in differ[:MAX_KEYS_SAID]]
    if len(differ) > MAX_KEYS_SAID:
        said.append(f"and {len(differ) - MAX_KEYS_SAID} more")
    return "; ".join(said)


MAX_KEYS_SAID = 6  # of a changed policy or sandbox: the message stays a line or two
_ABSENT = object()


def _differences(before: Any, after: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """``(dotted key, the record's value, the current one)`` for each that differs, in key order; a mapping on both
    sides is compared key by key (``limits.memory_mb``), anything else whole."""
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return [] if before == after else [(prefix, before, after)]
    found = []
    for key in sorted(before.keys() | after.keys(), key=str):
        found += _differences(before.get(key, _ABSENT), after.get(key, _ABSENT), f"{prefix}.{key}" if prefix else key)
    return found


def _value(value: Any) -> str:
    return "(unset)" if value is _ABSENT else _short(json.dumps(value, sort_keys=True, default=str), 60)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit - 1]}…"


def resume(previous: Previous, reason: str, recorder_type: type[R],
           open_journal: Callable[[Path], Journal] = Journal) -> R:
    """A recorder that continues ``previous`` (the kernel was restarted for ``reason``)."""
    recorder = recorder_type(previous.notebook, previous.metadata, open_journal=open_journal,
                             resumed=previous.records)
    if recorder.journal.seq != previous.records[-1]["seq"]:
        recorder.journal.close()
        raise JournalError(f"{recorder.journal.path} changed while it was read; not continuing it")
    if not previous.ended:
        recorder.event("recovered", sync=True, notes=[
            "the host process before this one stopped without ending the record (killed, or its machine stopped)"])
    recorder.kernel_restarted(reason, None)
    return recorder


__all__ = ["Previous", "read_previous", "resume", "setup_changes"]
