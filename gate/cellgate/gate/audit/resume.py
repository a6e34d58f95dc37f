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
    """Which parts of the session's setup differ between two records' metadata."""
    changed = []
    for path in SETUP:
        before: Any = previous
        after: Any = current
        for part in path:
            before = before.get(part) if isinstance(before, dict) else None
            after = after.get(part) if isinstance(after, dict) else None
        if before != after:
            changed.append(".".join(path))
    return changed


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
