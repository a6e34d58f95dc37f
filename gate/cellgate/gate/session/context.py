"""What the three owners of a session share: its recorder, the one journal path, the task group, the bounds.

A session is built in dependency order around one ``SessionContext``: the
kernel (``session.kernel``), then the cells (``session.cells``), then the relay
(``session.relay``), each given what it uses when it is made, never patched
afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.session.bounds import HostBounds
from cellgate.gate.session.events import OnFailure, RelayEvents, Tasks


@dataclass(frozen=True)
class SessionContext:
    recorder: Recorder
    events: RelayEvents  # every journal write of the owners goes through it
    tasks: Tasks  # the session's task group: a child's failure ends the session
    bounds: HostBounds

    @classmethod
    def create(cls, recorder: Recorder, bounds: HostBounds | None = None,
               on_failure: OnFailure | None = None) -> SessionContext:
        return cls(recorder, RelayEvents(recorder), Tasks(on_failure=on_failure), bounds or HostBounds())
