"""``mcp-principal``: who owns a session of ``cellgate mcp serve`` (written by ``sessions``, once, before its
first cell). Registered in ``cellgate.journal_events``; kept as the notebook's ``metadata.cellgate.principal``
(``{"name": ..., "issuer": ...}``, the issuer ``static-token`` for a static token)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cellgate.gate.ext import CellRecord
    from cellgate.gate.ext import JournalEventRun as Run


def render_principal(run: Run, record: dict[str, Any]) -> CellRecord | None:
    principal = record.get("principal")
    if isinstance(principal, dict):
        run.sections["principal"] = {k: str(principal[k]) for k in ("name", "issuer") if k in principal}
    return None
