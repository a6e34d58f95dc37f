"""An audit notebook read into what ``show`` and ``report`` present: cells, their times, calls and markers.

The notebook is hostile input: every field is type-checked where it is read, and
anything missing or mistyped reads as unknown ('?', None, empty), never as an
exception. Strings are kept as recorded; each view escapes them for its medium.
The notebook keeps no session start or end time, so the run's span is from its
first cell's start to its last cell's end; a kernel restart keeps no time either,
only its place between two cells.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cellgate.gate.audit.call_summary import as_dict, as_list, is_late, parse_time, text_of

TRACE_ID = re.compile(r"^[0-9a-f]{32}$")  # W3C hex, as the journal records it


@dataclass(frozen=True)
class Restart:
    """A kernel restart under the session, between code cell ``after`` (0: before the first) and the next."""

    after: int
    reason: str  # memory, message-size, frontend, or what the record says
    variables_gone: list[str] | None

    @property
    def memory(self) -> bool:
        return self.reason == "memory"


# The notes the record keeps where its session was paused, resumed, forked, tried or continued elsewhere
# (``audit.reducer.LIVE_EVENTS``, and ``session-ended`` naming where a kept trial goes on; a test keeps them equal).
NOTE_KINDS = ("session-paused", "session-resumed", "session-forked", "trial-kept", "trial-discarded",
              "session-continued", "plan-made", "plan-applied", "session-ended")


@dataclass(frozen=True)
class Note:
    """A note of the session's branches, between code cell ``after`` (0: before the first) and the next: the text
    the audit notebook shows (``audit.reducer.live_note``) and the notebooks it names (where a branch went)."""

    after: int
    kind: str
    text: str
    checkpoint: str
    notebooks: tuple[str, ...]  # a trial's fork, the notebook a kept trial goes on in (or came from)
    forks: int | None  # how many sessions a fork made (None: a pool's, or not recorded)


@dataclass
class CellView:
    number: int  # 1-based, among the run's code (and direct) cells: what `show --cell N` names
    kind: str  # code, or direct (a tool the model called on its own turn)
    status: str
    started: datetime | None
    ended: datetime | None
    source: str
    error: tuple[str, str] | None  # (ename, evalue) of the program's exception
    calls: list[dict[str, Any]]
    late_outputs: list[dict[str, Any]]
    limits_hit: list[str]
    meta: dict[str, Any] = field(repr=False)  # the cell's metadata.cellgate, as recorded

    @property
    def seconds(self) -> float | None:
        if self.started is None or self.ended is None or self.ended < self.started:
            return None
        return (self.ended - self.started).total_seconds()

    @property
    def title(self) -> str:
        return title(self.source)

    @property
    def late_calls(self) -> list[dict[str, Any]]:
        """Calls that finished after the cell ended (or had not finished when the notebook was written)."""
        ended = self.meta.get("ended")
        return [call for call in self.calls if is_late(call, ended)]


@dataclass
class RunView:
    name: str
    meta: dict[str, Any]  # metadata.cellgate
    cells: list[CellView]
    restarts: list[Restart]
    notes: list[Note] = field(default_factory=list)
    marks: list[Restart | Note] = field(default_factory=list)  # the restarts and notes in the order recorded

    @property
    def started(self) -> datetime | None:
        return min((c.started for c in self.cells if c.started is not None), default=None)

    @property
    def ended(self) -> datetime | None:
        return max((c.ended for c in self.cells if c.ended is not None), default=None)

    @property
    def seconds(self) -> float | None:
        first, last = self.started, self.ended
        return (last - first).total_seconds() if first is not None and last is not None and last >= first else None

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [call for cell in self.cells for call in cell.calls]

    @property
    def principal(self) -> str | None:
        """Whom the session acted for (``cellgate mcp serve``'s authenticated principal), as "name (issuer)"."""
        principal = self.meta.get("principal")
        name = principal.get("name") if isinstance(principal, dict) else None
        if not isinstance(name, str):
            return None
        issuer = principal.get("issuer") if isinstance(principal, dict) else None
        return name + (f" ({issuer})" if isinstance(issuer, str) and issuer else "")

    @property
    def trace_id(self) -> str | None:
        """The OpenTelemetry trace the session's cells were recorded in (their ``trace``), if it was traced."""
        for cell in self.cells:
            found = as_dict(cell.meta.get("trace")).get("trace_id")
            if isinstance(found, str) and TRACE_ID.match(found):
                return found
        return None

    def cell(self, number: int) -> CellView:
        """Code cell ``number`` (1-based); ValueError naming the range when there is none."""
        if not 1 <= number <= len(self.cells):
            have = f"cells 1 to {len(self.cells)}" if self.cells else "no code cells"
            raise ValueError(f"there is no cell {number}: {self.name} has {have}")
        return self.cells[number - 1]


def source_of(cell: Mapping[str, Any]) -> str:
    """A cell's source: nbformat writes a multi-line one as a list of its lines."""
    source = cell.get("source")
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    return source if isinstance(source, str) else ""


def title(source: str) -> str:
    """A program's title: its first line that is neither blank nor a comment (else its first non-blank line)."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("#")), lines[0] if lines else "")


def _error(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    error = as_dict(meta.get("error"))
    if not error:
        return None
    return text_of(error.get("ename")) or "?", text_of(error.get("evalue"))


def read_run(nb: Mapping[str, Any], name: str) -> RunView:
    """The run of an nbformat 4 notebook (as JSON, or nbformat's own nodes) with cellgate metadata."""
    cells: list[CellView] = []
    restarts: list[Restart] = []
    notes: list[Note] = []
    marks: list[Restart | Note] = []
    for raw in as_list(nb.get("cells")):
        cell = as_dict(raw)
        meta = as_dict(as_dict(cell.get("metadata")).get("cellgate"))
        if cell.get("cell_type") == "markdown" and meta.get("kind") == "kernel-restarted":
            gone = meta.get("variables_gone")
            restarts.append(Restart(len(cells), text_of(meta.get("reason")) or "?",
                                    [text_of(v) for v in gone] if isinstance(gone, list) else None))
            marks.append(restarts[-1])
        if cell.get("cell_type") == "markdown" and meta.get("kind") in NOTE_KINDS:
            forks = meta.get("forks")
            notes.append(Note(len(cells), str(meta["kind"]), source_of(cell).replace("**", ""),
                              text_of(meta.get("checkpoint")),
                              tuple(text_of(meta.get(k)) for k in ("notebook", "continued_in", "continued_from")
                                    if text_of(meta.get(k))),
                              forks if isinstance(forks, int) and not isinstance(forks, bool) else None))
            marks.append(notes[-1])
        if cell.get("cell_type") != "code":
            continue
        cells.append(CellView(
            number=len(cells) + 1, kind="direct" if meta.get("kind") == "direct" else "code",
            status=text_of(meta.get("status")) or "?", started=parse_time(meta.get("started")),
            ended=parse_time(meta.get("ended")), source=source_of(cell), error=_error(meta),
            calls=[as_dict(c) for c in as_list(meta.get("calls"))],
            late_outputs=[as_dict(o) for o in as_list(meta.get("late_outputs"))],
            limits_hit=[text_of(x) for x in as_list(meta.get("limits_hit"))], meta=meta))
    return RunView(name, as_dict(as_dict(nb.get("metadata")).get("cellgate")), cells, restarts, notes, marks)


__all__ = ["NOTE_KINDS", "CellView", "Note", "Restart", "RunView", "read_run", "source_of", "title"]
