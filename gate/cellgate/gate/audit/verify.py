"""`cellgate verify`: is this notebook what its signed journal says happened?

Checked, in order, and every problem reported with its place:

1. the journal (only the plain ``<name>.journal.jsonl`` beside the notebook,
   a regular file, read line by line with a cap): every record's hash, the
   chain from the first record, and every record's MAC under this host's key
   (the key the run names must be this host's: "signed with key X; this
   host's key is Y");
2. the notebook's recorded position is a record of that journal (a journal
   whose tail was cut off is named with its missing records and the cells the
   notebook shows beyond its end), and no record follows it (a notebook
   rendered from a prefix of its journal, or a run whose host stopped, fails:
   "run `cellgate recover`"), and the journal ends as a run ends
   (``session-ended`` or ``recovered``), so a journal cut short at a record
   boundary does not pass for a whole run;
3. the notebook's content equals the one the journal renders, compared under
   ``canonical`` (what frontends do on save is tolerated; any change to a
   source, output, call, decision or metadata field is not; a cell added or
   deleted is named, and so is a host-authored calls output that was edited,
   removed or duplicated; its calls bundle may be missing, as a save through
   nbformat v3 leaves it, the table and metadata.cellgate.calls still say the same);
4. every result blob the journal names is the run's own, a regular file of
   the recorded size and sha256;
5. a kept trial's links (``Trial.keep``): a record that ends naming the
   notebook it continues in (``continued_in``) has that notebook beside it,
   whose signed journal names this one (``session-continued`` with
   ``continued_from``), and a record that continues another has it beside
   it, ending with ``continued_in`` naming this one. One link each way (every
   notebook of a chain is verified on its own), and a name is followed only
   when it is a plain notebook file name: never out of this folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import ConfigError
from cellgate.gate.audit.artifacts import ArtifactError, blob_text, open_confined
from cellgate.gate.audit.calls_view import CALLS_MIME, is_host_output
from cellgate.gate.audit.canonical import canonical_cell, canonical_metadata, canonical_source
from cellgate.gate.audit.journal import JournalRead, read_journal
from cellgate.gate.audit.notebook_file import journal_of, load_notebook
from cellgate.gate.audit.reducer import Reducer

ENDINGS = ("session-ended", "recovered", "session-paused")  # paused: its kernel is a checkpoint (``session.live``)


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)
    key_id: str | None = None  # this host's key, which signed every record (when there are no problems)
    records: int = 0
    blobs: int = 0
    # The problem (also in ``problems``) that the journal does not end as a run ends: records after the
    # notebook's position, a torn last record or no ending record. A run still going has it until it ends.
    unended: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _label(cell: Any) -> str:
    source = canonical_source(cell.get("source", ""))
    first = str(source).strip().splitlines()[0] if str(source).strip() else ""
    return f"({cell.get('cell_type')}, {first[:60]!r})"


def _calls_output_difference(want: list[Any], have: list[Any]) -> str | None:
    """How the host-authored calls output of a cell differs from the journal's, or None."""
    wanted = [o for o in want if is_host_output(o)]
    found = [o for o in have if is_host_output(o)]
    if len(found) > len(wanted):
        def times(n: int) -> str:
            return f"{n} time{'s' if n != 1 else ''}"
        return (f"host-authored calls output, which appears {times(len(found))} (the host wrote it "
                f"{times(len(wanted))}): an output was added")
    if len(found) < len(wanted):
        return "host-authored calls output, which was removed"
    if not _same(wanted, found):
        return "host-authored calls output, which was edited: it no longer shows the journal's calls"
    return None


def _without_lost_bundle(want: list[Any], have: list[Any]) -> list[Any]:
    """The journal's outputs, without the calls bundle where the notebook's host output lost it whole.

    A save through nbformat v3 drops vendor MIME types; the calls are still
    compared in metadata.cellgate and the table, and a bundle that is there
    must match.
    """
    kept = []
    for index, output in enumerate(want):
        saved = have[index] if index < len(have) else None
        data = saved.get("data") if isinstance(saved, dict) and is_host_output(saved) else None
        if is_host_output(output) and isinstance(data, dict) and CALLS_MIME not in data:
            output = {**output, "data": {k: v for k, v in output["data"].items() if k != CALLS_MIME}}
        kept.append(output)
    return kept


def _cell_difference(want: Any, have: Any) -> str | None:
    """The first part in which a notebook cell differs from the journal's, or None."""
    want_parts, have_parts = canonical_cell(want), canonical_cell(have)
    want_parts["outputs"] = _without_lost_bundle(want_parts["outputs"], have_parts["outputs"])
    for part in ("cell_type", "source", "outputs", "execution_count", "cellgate"):
        if not _same(want_parts[part], have_parts[part]):
            if part == "outputs":
                return _calls_output_difference(want_parts[part], have_parts[part]) or part
            if part == "cellgate":
                calls = (want_parts[part] or {}).get("calls"), (have_parts[part] or {}).get("calls")
                return "calls" if not _same(*calls) else "metadata.cellgate"
            return part
    return None


def _count_difference(expected: list[Any], cells: list[Any]) -> str:
    """Which cell was added to or deleted from the notebook, when the rest is the journal's; else where they part."""
    count = f"the notebook has {len(cells)} cells, the journal {len(expected)}"
    shared = min(len(expected), len(cells))
    first = next((i for i, (want, have) in enumerate(zip(expected, cells)) if _cell_difference(want, have)), shared)
    if len(cells) == len(expected) - 1 and all(_cell_difference(w, h) is None
                                               for w, h in zip(expected[first + 1:], cells[first:])):
        return f"{count}: cell {first + 1} of the journal {_label(expected[first])} is missing from the notebook"
    if len(cells) == len(expected) + 1 and all(_cell_difference(w, h) is None
                                               for w, h in zip(expected[first:], cells[first + 1:])):
        return f"{count}: the notebook's cell {first + 1} {_label(cells[first])} is not in the journal"
    if first == shared:  # one is the other with more cells at its end
        longer, which = (expected, "the journal") if len(expected) > len(cells) else (cells, "the notebook")
        return f"{count}: the first {shared} agree, and cells {shared + 1} to {len(longer)} are only in {which}"
    what = _cell_difference(expected[first], cells[first])
    return (f"{count}; they differ from cell {first + 1} on: the notebook's cell {first + 1} {_label(cells[first])} "
            f"is not the journal's {_label(expected[first])} (it differs in its {what})")


def _compare(expected: Any, nb: Any, metadata: bool = True) -> list[str]:
    if metadata and not _same(canonical_metadata(expected), canonical_metadata(nb)):
        return ["the notebook's metadata.cellgate differs from the journal"]
    if len(expected.cells) != len(nb.cells):
        return [_count_difference(expected.cells, nb.cells)]
    for index, (want, have) in enumerate(zip(expected.cells, nb.cells), start=1):
        what = _cell_difference(want, have)
        if what is not None:
            return [f"cell {index} differs from the journal in its {what}"]
    return []


def _check_blobs(folder: Path, journal_file: str, records: list[dict[str, Any]],
                 reducer: Reducer) -> tuple[int, list[str]]:
    cells = {cell.msg_id: index for index, cell in enumerate([c for c in reducer.cells if c.status is not None],
                                                              start=1)}
    checked, problems = 0, []
    for record in records:
        call = record.get("call") if record.get("event") == "call-finished" else None
        if not isinstance(call, dict) or "result_blob" not in call:
            continue
        cell = cells.get(str(record.get("msg_id")))
        where = f"call #{call.get('seq')} ({call.get('tool')})" + (f" of cell {cell}" if cell else "")
        try:
            blob_text(folder, journal_file, call, where)
        except ArtifactError as exc:
            problems.append(str(exc))
        checked += 1
    return checked, problems


def _cut_short(result: Verification, nb: Any, found: JournalRead, seq: int, journal_file: str) -> Verification:
    """The notebook names a record past the journal's end: the journal lost its tail. Which cells lost theirs?"""
    records = found.records
    last, missing = records[-1], seq - len(records)
    torn = " (the record after it was cut short mid-write)" if found.torn_tail else ""
    gone = f"records {len(records) + 1} to {seq} are" if missing > 1 else f"record {seq} is"
    result.problems.append(
        f"the notebook names journal record {seq}, but the journal ends at record {last['seq']} ({last['event']})"
        f"{torn}: {gone} missing; the journal was cut short or replaced")
    reducer = Reducer()
    for record in records:
        reducer.apply(record)
    result.problems += [f"{problem} (as far as the journal goes)"
                        for problem in _compare(reducer.notebook(journal_file), nb, metadata=False)]
    return result


MAX_NAME = 255


def _plain_name(name: object) -> str | None:
    """A neighbour's notebook name as a record gives it, if it is a plain notebook file name (else None)."""
    if not isinstance(name, str) or len(name) > MAX_NAME or not name.endswith(".ipynb") or name.startswith("."):
        return None
    return name if name.isprintable() and "/" not in name and "\\" not in name else None


def _neighbour(folder: Path, name: str, key: hostkey.HostKey) -> list[dict[str, Any]] | str:
    """The records of the signed journal of notebook ``name`` in ``folder``, or why they cannot be read."""
    try:
        found = read_journal(open_confined(folder, f"{name[:-len('.ipynb')]}.journal.jsonl", "its journal"), key)
    except ConfigError as exc:
        return str(exc)
    return found.problem or found.records


def _check_links(path: Path, records: list[dict[str, Any]], key: hostkey.HostKey) -> list[str]:
    """Problems with the notebooks a kept trial links this one to (``continued_in``, ``continued_from``)."""
    problems = []
    last, came = records[-1], next((r for r in records if r.get("event") == "session-continued"), None)
    links = [("continued_in", last)] if last.get("event") == "session-ended" and "continued_in" in last else []
    links += [("continued_from", came)] if came is not None else []
    for field_name, record in links:
        told = record.get(field_name)
        name = _plain_name(told)
        verb = "continues in" if field_name == "continued_in" else "continues"
        if name is None:
            problems.append(f"the record says it {verb} {str(told)[:100]!r}, which is not a plain notebook name "
                            "beside it; it is not followed, and the link is not checked")
            continue
        found = _neighbour(path.parent, name, key)
        if isinstance(found, str):
            problems.append(f"the record says it {verb} {name}, whose signed journal cannot be read beside it: "
                            f"{found}")
        elif field_name == "continued_in" and not any(
                r.get("event") == "session-continued" and r.get("continued_from") == path.name for r in found):
            problems.append(f"the record says it continues in {name}, whose journal does not name {path.name} as "
                            "the notebook it continues (no session-continued record naming it)")
        elif field_name == "continued_from" and not (
                found and found[-1].get("event") == "session-ended" and found[-1].get("continued_in") == path.name):
            problems.append(f"the record says it continues {name}, whose journal does not end naming {path.name} "
                            "as the notebook it continues in")
    return problems


def check_run(path: Path) -> Verification:
    """Verify a run; problems are empty when it is intact and signed with this host's key."""
    nb = load_notebook(path)
    result = Verification()
    try:
        journal_file = journal_of(path, nb)
        key = hostkey.load(create=False)
        found = read_journal(open_confined(path.parent, journal_file, "the journal"), key)
    except ConfigError as exc:
        return Verification([str(exc)])
    if found.problem:
        return Verification([found.problem])
    records = found.records
    result.records = len(records)
    head = nb.metadata.cellgate.get("journal") or {}
    seq, digest = head.get("seq"), head.get("hash")
    if isinstance(seq, int) and seq > len(records) >= 1:
        return _cut_short(result, nb, found, seq, journal_file)
    if not (isinstance(seq, int) and 1 <= seq <= len(records) and records[seq - 1]["hash"] == digest):
        return Verification([f"the notebook names journal record {seq} with hash {str(digest)[:16]}…, which the "
                             "journal does not have: the notebook or the journal was replaced"])
    after = len(records) - seq
    if after:
        result.unended = (f"the journal has {after} record{'s' if after != 1 else ''} after the notebook's "
                          f"last position (record {seq}): the notebook does not show all of the run; "
                          f"run `cellgate recover {journal_file}`")
    elif found.torn_tail:
        result.unended = (f"the journal's last record was cut short (its host stopped while writing it); "
                          f"run `cellgate recover {journal_file}`")
    elif records[-1]["event"] not in ENDINGS:
        result.unended = (f"the journal ends at record {seq} ({records[-1]['event']}) without a session-ended "
                          "or recovered record (nor a session-paused one): the run is still going, its host stopped, or the journal was "
                          f"cut short; if its host stopped, run `cellgate recover {journal_file}`")
    if result.unended:
        result.problems.append(result.unended)
    reducer = Reducer()
    for record in records[:seq]:
        reducer.apply(record)
    result.problems += _compare(reducer.notebook(journal_file), nb)
    result.blobs, blob_problems = _check_blobs(path.parent, journal_file, records, reducer)
    result.problems += blob_problems
    result.problems += _check_links(path, records, key)
    if not result.problems:
        result.key_id = key.key_id
    return result


def verify(path: Path) -> list[str]:
    """Problems found (empty when the notebook matches its intact, signed journal)."""
    return check_run(path).problems


__all__ = ["Verification", "check_run", "verify"]
