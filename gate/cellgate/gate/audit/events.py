"""Journal events an extension adds, and how the audit notebook shows them.

The core renders its own events (cells, calls, outputs, restarts). An
extension that writes events of its own (the Anthropic agent loop's task,
turns and ending) registers a render function per event name in the
entry-point group ``cellgate.journal_events``::

    [project.entry-points."cellgate.journal_events"]
    model-turn = "my_extension.events:render_model_turn"

The ``Reducer`` calls it with itself (as a ``Run``) and the journal record,
for live recording, ``cellgate recover`` and ``cellgate verify`` alike, so a
renderer must be a pure function of the records it has seen. It may add a
markdown cell and keep a section of the notebook's ``metadata.cellgate``.
An event nobody registered stays in the journal and is not shown.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import EntryPoint
from typing import Any, Protocol

from cellgate.gate._entry_points import entry_points
from cellgate.gate.audit.cells import CellRecord

GROUP = "cellgate.journal_events"


class Run(Protocol):
    """What a renderer may touch of the run being rendered (the ``Reducer``)."""

    sections: dict[str, Any]  # extra sections of the notebook's metadata.cellgate, by name

    def markdown_cell(self, cell_id: str, source: str, time: str, extra: dict[str, Any]) -> CellRecord:
        """Add a markdown cell; ``extra`` becomes its metadata.cellgate (after ``kind: model``)."""
        ...


Renderer = Callable[[Run, dict[str, Any]], "CellRecord | None"]


@cache
def _registered() -> dict[str, EntryPoint]:
    return {entry.name: entry for entry in entry_points(group=GROUP)}


@cache
def renderer(event: str) -> Renderer | None:
    """The render function registered for ``event``, loaded on first use; None if there is none."""
    entry = _registered().get(event)
    if entry is None:
        return None
    render = entry.load()
    if not callable(render):
        raise TypeError(f"the {GROUP} entry point {entry.name!r} ({entry.value}) is not a function; "
                        "register a render function (run, record) -> cell or None")
    return render  # type: ignore[no-any-return]


__all__ = ["GROUP", "Renderer", "Run", "renderer"]
