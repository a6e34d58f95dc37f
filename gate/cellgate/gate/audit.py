"""Reading a run: load its notebook safely, summarise it in the terminal (verification: ``verification``)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .artifacts import MAX_NOTEBOOK_BYTES, journal_name, open_regular, read_capped
from .errors import ConfigError
from .gate_text import visible


def load_notebook(path: Path) -> Any:
    """An audit notebook the operator named: a regular file, read with a cap, with cellgate metadata."""
    try:
        text = read_capped(open_regular(path, "the notebook"), MAX_NOTEBOOK_BYTES, f"the notebook {path}")
        nb = nbformat.reads(text.decode("utf-8"), as_version=4)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not JSON, not a notebook, not UTF-8
        raise ConfigError(f"{path}: not a readable notebook: {exc}; is it a cellgate audit notebook?") from None
    if not isinstance(nb.metadata.get("cellgate"), dict):
        raise ConfigError(f"{path}: has no cellgate metadata; it is not a cellgate audit notebook")
    return nb


def journal_of(path: Path, nb: Any) -> str:
    """The journal's file name, checked to be a plain ``<name>.journal.jsonl`` beside the notebook."""
    journal = nb.metadata.cellgate.get("journal")
    return journal_name(journal.get("file") if isinstance(journal, dict) else None, path)


def _duration(cell: Any) -> str:
    meta = cell.metadata.get("cellgate", {})
    try:
        start = datetime.fromisoformat(meta["started"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(meta["ended"].replace("Z", "+00:00"))
    except (KeyError, TypeError, ValueError, AttributeError):
        return "?"
    return f"{(end - start).total_seconds():.2f} s"


STATUS_STYLE = {"ok": "green", "error": "red", "interrupted": "yellow", "timeout": "red", "killed": "bold red",
                "kernel-died": "bold red", "memory": "bold red", "rejected": "yellow"}


def show(path: Path, console: Console | None = None) -> int:
    """A terminal summary of a run; returns the number of cells that did not end ok."""
    console = console or Console(highlight=False)
    nb = load_notebook(path)
    meta = nb.metadata.cellgate
    sandbox = meta.get("sandbox", {})
    console.print(f"[bold]{escape(path.name)}[/]  session {escape(str(meta.get('session_id', '?'))[:12])}  "
                  f"sandbox {escape(str(sandbox.get('runtime', sandbox.get('isolation', '?'))))} "
                  f"{escape(str(sandbox.get('runsc_version', '')))} {escape(str(sandbox.get('platform', '')))}")
    if meta.get("replay_of"):
        console.print(f"replay of {escape(str(meta['replay_of'].get('notebook')))}")
    table = Table(show_lines=False)
    for column in ("#", "status", "duration", "calls", "program (first line)"):
        table.add_column(column)
    failed, decisions, total_calls = 0, {}, 0
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for index, cell in enumerate(code_cells, start=1):
        cg = cell.metadata.get("cellgate", {})
        status = str(cg.get("status"))
        failed += status != "ok"
        calls = cg.get("calls", [])
        total_calls += len(calls)
        style = STATUS_STYLE.get(status, "white")
        first = visible(cell.source.strip().splitlines()[0] if cell.source.strip() else "")[:60]
        table.add_row(str(index), f"[{style}]{escape(status)}[/]", _duration(cell), str(len(calls)), escape(first))
        for call in calls:
            decisions[call.get("decision")] = decisions.get(call.get("decision"), 0) + 1
    console.print(table)
    for index, cell in enumerate(code_cells, start=1):
        calls = cell.metadata.get("cellgate", {}).get("calls", [])
        shown = [c for c in calls if not c.get("ok")] + [c for c in calls if c.get("ok")][:5]
        if not calls:
            continue
        console.print(f"cell {index}: {len(calls)} call(s)" + (" (failures first, then the first 5)" if len(calls) > 5 else ""))
        for call in shown:
            outcome = "[green]ok[/]" if call.get("ok") else \
                f"[red]{escape(str((call.get('error') or {}).get('kind', call.get('outcome', 'failed'))))}[/]"
            console.print(f"  #{call.get('seq')} {escape(str(call.get('tool')))} "
                          f"decision={escape(str(call.get('decision')))} {outcome} "
                          f"{call.get('duration_ms', 0):.1f} ms")
    console.print(f"totals: {len(code_cells)} cells ({failed} not ok), {total_calls} calls "
                  f"({', '.join(f'{k}: {v}' for k, v in sorted(decisions.items(), key=str)) or 'none'})")
    agent = meta.get("agent")
    if agent:
        usage = agent.get("usage") or {}
        ended = agent.get("ended") or {"reason": "still running, or the host stopped"}
        console.print(f"agent: model {escape(str(agent.get('model')))}, mode {escape(str(agent.get('mode')))}, "
                      f"{len(agent.get('turns') or [])} turns, ended {escape(str(ended.get('reason')))}; "
                      f"tokens in {usage.get('input_tokens', 0):,} out {usage.get('output_tokens', 0):,} "
                      f"cache read {usage.get('cache_read_input_tokens', 0):,} "
                      f"cache write {usage.get('cache_creation_input_tokens', 0):,}")
    return failed
