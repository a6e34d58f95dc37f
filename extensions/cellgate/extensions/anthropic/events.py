"""The agent loop's journal events, and how the audit notebook shows them.

``agent-started`` (the task: a markdown cell), ``model-turn`` (one API
response: its text a markdown cell, its token usage summed) and
``agent-ended`` (how the run ended). The model's text and the task are
untrusted (a prompt-injected model writes what its input told it to, such as
an image whose URL carries what it read): each cell shows them as the
sanitizer shows kernel markdown (``untrusted_markdown``: no remote image, TeX
defused, a note of what was removed); the journal keeps them as written. The loop writes them with the functions
below; the renderers are registered in the entry-point group
``cellgate.journal_events`` (see ``cellgate.gate.audit.events``) and keep
the notebook's ``metadata.cellgate.agent``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cellgate.gate.ext import untrusted_markdown

if TYPE_CHECKING:
    from cellgate.gate.ext import CellRecord, Recorder
    from cellgate.gate.ext import JournalEventRun as Run


# -- what the loop writes
def agent_started(recorder: Recorder, task: str, model: str, mode: str) -> None:
    recorder.event("agent-started", task=task, model=model, mode=mode)
    recorder.write_notebook()


def model_turn(recorder: Recorder, turn: int, model: str, text: str, usage: dict[str, int],
               stop_reason: str | None) -> None:
    """One API response: the model's text becomes a markdown cell; usage is summed in the metadata."""
    recorder.event("model-turn", turn=turn, model=model, text=text, usage=usage, stop_reason=stop_reason)
    recorder.write_notebook()


def agent_ended(recorder: Recorder, reason: str, turns: int, detail: str | None = None) -> None:
    recorder.event("agent-ended", sync=True, reason=reason, turns=turns, detail=detail)
    recorder.write_notebook()


# -- how the notebook shows it (registered renderers)
def render_agent_started(run: Run, record: dict[str, Any]) -> CellRecord | None:
    agent = {key: record[key] for key in ("task", "model", "mode") if key in record}
    run.sections["agent"] = {**agent, "turns": [], "usage": {}, "ended": None}
    source, removed = untrusted_markdown(f"**Task:** {record['task']}")
    return run.markdown_cell("agent-task", source, record["time"], {"kind": "task", **_removed(removed)})


def render_model_turn(run: Run, record: dict[str, Any]) -> CellRecord | None:
    agent = run.sections.get("agent")
    if agent is None:  # no agent-started before it: not an agent run
        return None
    usage = {k: int(v) for k, v in (record.get("usage") or {}).items() if isinstance(v, int)}
    turn = {"turn": record["turn"], "model": record.get("model"), "stop_reason": record.get("stop_reason"),
            "usage": usage}
    agent["turns"].append(turn)
    totals = agent["usage"]
    for key, value in usage.items():
        totals[key] = totals.get(key, 0) + value
    if str(record.get("text") or "").strip():
        source, removed = untrusted_markdown(str(record["text"]))
        return run.markdown_cell(f"turn-{record['turn']}", source, record["time"], {**turn, **_removed(removed)})
    return None


def _removed(removed: list[str]) -> dict[str, Any]:
    """The cell's metadata note of what the sanitizer removed from the text it shows (none: no key)."""
    return {"sanitized": removed} if removed else {}


def render_agent_ended(run: Run, record: dict[str, Any]) -> CellRecord | None:
    agent = run.sections.get("agent")
    if agent is not None:
        agent["ended"] = {"reason": record["reason"], "turns": record.get("turns"), "detail": record.get("detail")}
    return None


__all__ = ["agent_ended", "agent_started", "model_turn", "render_agent_ended", "render_agent_started",
           "render_model_turn"]
