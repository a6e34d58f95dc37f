"""`cellgate recover`: render the notebook from a journal after any crash."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat import NotebookNode

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import write_atomically
from cellgate.gate.audit.journal import Journal, JournalError, read_journal
from cellgate.gate.audit.reducer import Reducer


def rebuild(journal: Path, notebook: Path | None = None) -> tuple[Path, NotebookNode, list[str]]:
    """Render the notebook of ``journal`` (to ``notebook`` or beside it); returns it and notes for the operator."""
    found = read_journal(journal)
    if found.problem and not found.records:
        raise ConfigError(f"{journal}: no readable journal record: {found.problem}; nothing to recover")
    notes = []
    if found.torn_tail:
        notes.append("the last journal record was cut short by the crash and was ignored")
    if found.problem:
        notes.append(f"stopped at a damaged record: {found.problem}")
    else:
        # The recovery is itself a journal record, so the rebuilt notebook verifies.
        writer: Journal | None
        try:
            writer = Journal(journal)
        except JournalError as exc:  # signed with another host's key, or unsigned: render it, append nothing
            notes.append(f"no recovery record was appended: {exc}")
            writer = None
        if writer is not None:
            writer.append("recovered", sync=True, notes=notes)
            writer.close()
            found = read_journal(journal)
    reducer = Reducer()
    for record in found.records:
        reducer.apply(record)
    if found.problem or not found.records or found.records[-1]["event"] != "recovered":
        reducer.crash_ending()
    target = notebook or journal.with_name(journal.name.removesuffix(".journal.jsonl") + ".ipynb")
    nb = reducer.notebook(journal.name)
    nbformat.validate(nb)
    for orphan in target.parent.glob(f".{target.name}.*.tmp"):
        orphan.unlink(missing_ok=True)
        notes.append(f"removed an unfinished notebook write {orphan.name}")
    write_atomically(target, nbformat.writes(nb))
    return target, nb, notes


__all__ = ["rebuild"]
