"""Reading a run: verify it against its journal, summarise it in the terminal."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import ConfigError
from .gate_text import visible
from .journal import read_journal
from .recorder import Reducer


def load_notebook(path: Path) -> Any:
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable notebook: {exc}; is it a cellgate audit notebook?") from None
    if "cellgate" not in nb.metadata:
        raise ConfigError(f"{path}: has no cellgate metadata; it is not a cellgate audit notebook")
    return nb


def journal_of(path: Path, nb: Any) -> Path:
    name = (nb.metadata.cellgate.get("journal") or {}).get("file")
    if not name:
        raise ConfigError(f"{path}: its metadata names no journal")
    return path.parent / name


def _comparable(cell: Any) -> dict[str, Any]:
    return {"source": cell.source, "outputs": cell.get("outputs", []), "execution_count": cell.get("execution_count"),
            "cellgate": cell.metadata.get("cellgate")}


def verify(path: Path) -> list[str]:
    """Problems found (empty when the notebook matches its intact journal)."""
    nb = load_notebook(path)
    journal = journal_of(path, nb)
    if not journal.exists():
        return [f"the journal {journal.name} is missing"]
    found = read_journal(journal)
    if found.problem:
        return [found.problem]
    head = nb.metadata.cellgate.journal
    reducer = Reducer()
    for record in found.records:
        reducer.apply(record)
        if record["seq"] == head.get("seq"):
            break
    if reducer.head != {"seq": head.get("seq"), "hash": head.get("hash")}:
        return [f"the notebook names journal record {head.get('seq')} with hash {str(head.get('hash'))[:16]}…, "
                "which the journal does not have: the notebook or the journal was replaced"]
    expected = nbformat.reads(nbformat.writes(reducer.notebook(journal.name)), as_version=4)
    if json.dumps(expected.metadata.cellgate, sort_keys=True) != json.dumps(nb.metadata.cellgate, sort_keys=True):
        return ["the notebook's metadata differs from the journal"]
    if len(expected.cells) != len(nb.cells):
        return [f"the notebook has {len(nb.cells)} cells, the journal {len(expected.cells)}"]
    for index, (want, have) in enumerate(zip(expected.cells, nb.cells), start=1):
        want_parts, have_parts = _comparable(want), _comparable(have)
        for part in ("source", "outputs", "execution_count", "cellgate"):
            if json.dumps(want_parts[part], sort_keys=True) != json.dumps(have_parts[part], sort_keys=True):
                what = "calls" if part == "cellgate" and want_parts[part].get("calls") != have_parts[part].get("calls") \
                    else part
                return [f"cell {index} differs from the journal in its {what}"]
    return []


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


def claims_text(call: dict[str, Any]) -> str:
    """The kernel's unverified claims about a call (line, source line, thread), labelled as such."""
    claimed = call.get("claimed")
    if not isinstance(claimed, dict) or not claimed:
        return ""
    parts = []
    if claimed.get("line") is not None:
        parts.append(f"line {claimed['line']}")
    if claimed.get("source_line"):
        parts.append(repr(str(claimed["source_line"])[:120]))
    if claimed.get("thread"):
        parts.append(f"thread {str(claimed['thread'])[:60]!r}")
    return "reported by the kernel: " + ", ".join(parts) if parts else ""


def _claims(call: dict[str, Any]) -> str:
    text = claims_text(call)
    return f" [dim]({escape(text)})[/]" if text else ""


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
                          f"{call.get('duration_ms', 0):.1f} ms{_claims(call)}")
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
