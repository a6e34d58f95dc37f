"""The audit notebook rendered from a run's cells (nbformat v4).

Cells are built directly, not with ``new_code_cell``, which validates the
cell against the schema on every rendering; the outputs were validated when
captured, and the whole notebook is validated when the session closes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import new_markdown_cell, new_notebook
from nbformat.v4 import writes as nbjson_writes
from nbformat.v4.rwbase import split_lines

from cellgate.gate._json import notebook_json, sha256_hex
from cellgate.gate.audit.calls_view import calls_output
from cellgate.gate.audit.cells import CellRecord
from cellgate.gate.audit.journal import json_safe
from cellgate.gate.audit.sanitize import FORGED


class Run(Protocol):
    """What a rendering reads of a run: the reducer's state (``reducer.Reducer`` is one). A protocol, so this
    module does not import the reducer, which renders through it."""

    @property
    def metadata(self) -> dict[str, Any]: ...
    @property
    def sections(self) -> dict[str, Any]: ...
    @property
    def cells(self) -> Sequence[CellRecord]: ...
    @property
    def head(self) -> dict[str, Any] | None: ...


def cell_node(cell: CellRecord) -> NotebookNode:
    """One cell as the notebook shows it; its id is its position in the run, so a rendering never differs."""
    if cell.kind == "markdown":
        markdown: NotebookNode = new_markdown_cell(source=cell.source)
        markdown.id = f"cell-{cell.serial}"
        markdown.metadata["cellgate"] = {"kind": "model", **cell.extra}
        return markdown
    calls = sorted([*cell.calls, *cell.pending_calls.values()], key=lambda c: c["seq"])
    outputs = [*cell.outputs, calls_output(calls, cell.ended, cell.status)] if calls else cell.outputs
    node: NotebookNode = nbformat.from_dict({
        "id": f"cell-{cell.serial}", "cell_type": "code", "metadata": {}, "execution_count": cell.execution_count,
        "source": cell.source, "outputs": [nbformat.from_dict(o) for o in outputs]})
    meta: dict[str, Any] = {
        "sha256": sha256_hex(cell.source),
        "started": cell.started,
        "ended": cell.ended,
        "status": cell.status,
        "limits_hit": list(cell.limits_hit),
        "calls": calls,
    }
    forged = forged_outputs(cell.outputs)
    if forged:  # outputs the kernel sent in cellgate's own name: renamed by sanitize, flagged here
        meta["forged_outputs"] = forged
    if cell.error:
        meta["error"] = cell.error
    if cell.journal:
        meta["journal"] = cell.journal
    if cell.silent:
        meta["silent"] = True
    if cell.kind in ("direct", "command"):
        meta["kind"] = cell.kind
    if cell.kind == "command":
        meta["argv"] = list(cell.extra.get("argv", []))
    if cell.subshell is not None:
        meta["subshell"] = cell.subshell
    if cell.trace:
        meta["trace"] = dict(cell.trace)
    if cell.refusals_dropped:
        meta["refusals_dropped"] = dict(cell.refusals_dropped)
    if cell.late_outputs:  # never merged into the outputs: flagged as what the cell's work printed after it
        meta["late_outputs"] = [dict(o) for o in cell.late_outputs]
    node.metadata["cellgate"] = meta
    return node


def forged_outputs(outputs: list[Any]) -> list[dict[str, Any]]:
    """Where the kernel's outputs claimed cellgate's MIME types or metadata (by output index)."""
    found = []
    for index, output in enumerate(outputs):
        notes = ((output.get("metadata") or {}).get("cellgate") or {}).get("sanitized") or []
        claimed = [n["mime"] for n in notes if str(n.get("action", "")).startswith(FORGED)]
        if claimed:
            found.append({"output": index, "claimed": claimed})
    return found


def notebook_metadata(run: Run, journal_name: str) -> dict[str, Any]:
    return {
        "kernelspec": {"name": "cellgate", "display_name": "cellgate (gVisor)", "language": "python"},
        "language_info": {"name": "python"},
        "cellgate": {**json_safe(run.metadata), **json_safe(run.sections),
                     "journal": {"file": journal_name, **(run.head or {})}},
    }


def notebook(run: Run, journal_name: str) -> NotebookNode:
    """The notebook of the run's ended cells (a cell still running is not shown)."""
    nb: NotebookNode = new_notebook(metadata=notebook_metadata(run, journal_name))
    nb.cells = [cell_node(c) for c in run.cells if c.status is not None]
    return nb


class NotebookText:
    """The notebook as nbformat JSON, reusing each ended cell's text while it is unchanged.

    Rewriting after every cell then costs a join of cached strings, not a
    re-serialisation of the whole run, so the per-cell cost stays flat. The
    envelope is nbformat's own writing of the notebook without its cells.
    """

    def __init__(self) -> None:
        self._cells: dict[int, tuple[int, str]] = {}  # serial -> (version, text)

    def _cell_text(self, cell: CellRecord) -> str:
        cached = self._cells.get(cell.serial)
        if cached is None or cached[0] != cell.version:
            node = split_lines(NotebookNode(cells=[cell_node(cell)])).cells[0]  # (a NotebookNode down to outputs)
            cached = self._cells[cell.serial] = (cell.version, notebook_json(node))
        return cached[1]

    def render(self, run: Run, journal_name: str) -> str:
        parts = [self._cell_text(cell) for cell in run.cells if cell.status is not None]
        envelope: str = nbjson_writes(new_notebook(metadata=notebook_metadata(run, journal_name)))
        empty = '{\n "cells": [],\n'
        assert envelope.startswith(empty), envelope[:40]  # sorted keys: "cells" comes first
        if parts:
            envelope = '{\n "cells": [\n' + ",\n".join(parts) + "\n ],\n" + envelope[len(empty):]
        return envelope + "\n"


__all__ = ["NotebookText", "Run", "cell_node", "forged_outputs", "notebook", "notebook_metadata"]
