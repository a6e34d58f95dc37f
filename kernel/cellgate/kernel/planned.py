"""What a cell being planned (``Session.plan``) gets for a write the gate did not make: a placeholder.

The write's real result is not known until the plan is applied. Code that
only passes the result along (collects it, prints it) runs on; code that
looks inside it (an attribute, an item, a comparison, a number, its truth)
fails loudly with ``PlannedResultUsed``, rather than planning on a made-up
value. A tool with a preview (``Tool.with_preview``) answers with that
instead.
"""

from __future__ import annotations

from typing import Any, NoReturn


class PlannedResultUsed(RuntimeError):
    """Code being planned looked inside the result of a write that was not made."""


class Planned:
    """The result of a planned write of ``tool``, unknown until the plan is applied."""

    __slots__ = ("_tool",)

    def __init__(self, tool: str) -> None:
        object.__setattr__(self, "_tool", tool)

    def __repr__(self) -> str:
        return f"<planned {object.__getattribute__(self, '_tool')} result: known once the plan is applied>"

    __str__ = __repr__

    def _used(self, *_: Any, **__: Any) -> NoReturn:
        tool = object.__getattribute__(self, "_tool")
        raise PlannedResultUsed(
            f"this cell is being planned: tool {tool!r} was not run, so its result is not known; code that only "
            f"passes it along can be planned, code that looks inside it cannot (give {tool!r} a preview with "
            "Tool.with_preview, or plan the writes that need it in a later cell)")

    def __getattr__(self, name: str) -> Any:
        self._used()

    __getitem__ = __iter__ = __len__ = __bool__ = __contains__ = _used
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _used
    __int__ = __float__ = __index__ = __add__ = __radd__ = __setattr__ = _used

    def __format__(self, spec: str) -> str:  # an f-string shows it, as print does
        return repr(self)
