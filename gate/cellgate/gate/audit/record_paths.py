"""Where a new session's record goes: never onto the record of an earlier session.

A record is three files side by side: the notebook, its journal and its blobs folder. A new session that
reused a path appended to the old journal and replaced the notebook, so ``cellgate verify`` failed on both.
A path the user chose (``cellgate exec --notebook``, ``Session(notebook=...)``) that holds a record is
refused (``RecordExists``); a name cellgate chooses itself (a ``Pool``'s, a replay's default) is
numbered on to the first free one (``free_path``).
"""

from __future__ import annotations

from pathlib import Path

from cellgate.gate._errors import RecordExists
from cellgate.gate.audit.blobs import blobs_path
from cellgate.gate.audit.recorder import journal_path

__all__ = ["existing_parts", "free_path", "refuse_existing"]


def existing_parts(notebook: Path) -> list[Path]:
    """The files of a record at ``notebook`` that exist already (a dangling link counts)."""
    parts = (notebook, journal_path(notebook), blobs_path(notebook))
    return [part for part in parts if part.is_symlink() or part.exists()]


def refuse_existing(notebook: Path) -> None:
    """RecordExists if ``notebook`` (a path the user chose) would write over an earlier record."""
    found = existing_parts(notebook)
    if found:
        names = ", ".join(part.name for part in found)
        raise RecordExists(
            f"the audit notebook {notebook} is taken: {names} in {notebook.parent} hold an earlier record, and a new "
            "session never writes over one; choose another path (cellgate exec --notebook, Session(notebook=...)), "
            "leave it out for a new timestamped notebook under [audit] dir, or move the earlier record away",
            notebook)


def free_path(notebook: Path) -> Path:
    """``notebook`` if no record is there, else the first of NAME-2, NAME-3, ... that is free."""
    if not existing_parts(notebook):
        return notebook
    number = 2
    while existing_parts(candidate := notebook.with_name(f"{notebook.stem}-{number}{notebook.suffix}")):
        number += 1
    return candidate
