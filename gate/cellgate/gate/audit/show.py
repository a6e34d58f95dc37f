"""Reading a run: load its notebook safely, summarise it in the terminal (verification: ``verification``)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cellgate.gate._errors import ConfigError
from cellgate.gate._terminal import reveal
from cellgate.gate.audit.artifacts import MAX_NOTEBOOK_BYTES, journal_name, open_regular, read_capped


def _text(path: Path) -> str:
    return read_capped(open_regular(path, "the notebook"), MAX_NOTEBOOK_BYTES, f"the notebook {path}").decode("utf-8")


def _unreadable(path: Path, problem: object) -> ConfigError:
    return ConfigError(f"{path}: not a readable notebook: {problem}; is it a cellgate audit notebook?")


def _no_cellgate(path: Path) -> ConfigError:
    return ConfigError(f"{path}: has no cellgate metadata; it is not a cellgate audit notebook")


def load_notebook(path: Path) -> Any:
    """An audit notebook the operator named: a regular file, read with a cap, with cellgate metadata."""
    import nbformat  # here: it imports jsonschema, more than all of `cellgate show` (which reads the JSON)

    try:
        # Not validated against nbformat's schema (nbformat.reads only logs what that finds, and compiling the
        # schema is slow): every field is checked where it is read.
        nb = nbformat.convert(nbformat.reader.reads(_text(path)), 4)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not JSON, not a notebook, not UTF-8
        raise _unreadable(path, exc) from None
    if not isinstance(nb.metadata.get("cellgate"), dict):
        raise _no_cellgate(path)
    return nb


def notebook_json(path: Path) -> dict[str, Any]:
    """An audit notebook as ``load_notebook`` checks it, as plain JSON (nbformat 4, as cellgate writes them):
    what ``show`` summarises, without importing nbformat."""
    try:
        nb = json.loads(_text(path))
    except ValueError as exc:  # not JSON, not UTF-8
        raise _unreadable(path, exc) from None
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        raise _unreadable(path, "not the JSON of an nbformat 4 notebook")
    if not isinstance(_dict(nb.get("metadata")).get("cellgate"), dict):
        raise _no_cellgate(path)
    return nb


def _source(cell: dict[str, Any]) -> str:
    """A cell's source: nbformat writes a multi-line one as a list of its lines."""
    source = cell.get("source")
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    return source if isinstance(source, str) else ""


def journal_of(path: Path, nb: Any) -> str:
    """The journal's file name, checked to be a plain ``<name>.journal.jsonl`` beside the notebook."""
    journal = nb.metadata.cellgate.get("journal")
    return journal_name(journal.get("file") if isinstance(journal, dict) else None, path)


def _duration(cell: dict[str, Any]) -> str:
    meta = _dict(_dict(cell.get("metadata")).get("cellgate"))
    try:
        start = datetime.fromisoformat(meta["started"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(meta["ended"].replace("Z", "+00:00"))
    except (KeyError, TypeError, ValueError, AttributeError):
        return "?"
    return f"{(end - start).total_seconds():.2f} s"


STATUS_STYLE = {"ok": "green", "error": "red", "interrupted": "yellow", "timeout": "red", "killed": "bold red",
                "kernel-died": "bold red", "memory": "bold red", "rejected": "yellow"}


def _field(value: Any, limit: int = 200) -> str:
    """A recorded value as one line a terminal shows as text (see ``terminal.reveal``)."""
    return reveal(value if isinstance(value, str) else str(value))[:limit]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def claims_text(call: dict[str, Any]) -> str:
    """The kernel's unverified claims about a call (line, source line, thread), labelled as such."""
    claimed = _dict(call.get("claimed"))
    parts = []
    if claimed.get("line") is not None:
        parts.append(f"line {_field(claimed['line'], 20)}")
    if claimed.get("source_line"):
        parts.append(repr(_field(claimed["source_line"], 120)))
    if claimed.get("thread"):
        parts.append(f"thread {_field(claimed['thread'], 60)!r}")
    return "reported by the kernel: " + ", ".join(parts) if parts else ""


def show(path: Path, console: Console | None = None) -> int:
    """A terminal summary of a run; returns the number of cells that did not end ok.

    Every recorded value is printed as text (``rich.text.Text``, never markup) and through
    ``terminal.reveal``, so a tampered notebook cannot move the cursor, write the clipboard or style text.
    """
    console = console or Console(highlight=False)

    def line(*parts: str | tuple[str, str]) -> None:
        console.print(Text.assemble(*parts), soft_wrap=True)

    nb = notebook_json(path)
    meta = _dict(nb["metadata"]["cellgate"])
    sandbox = _dict(meta.get("sandbox"))
    line((_field(path.name), "bold"), f"  session {_field(meta.get('session_id', '?'))[:12]}  "
         f"sandbox {_field(sandbox.get('runtime', sandbox.get('isolation', '?')))} "
         f"{_field(sandbox.get('runsc_version', ''))} {_field(sandbox.get('platform', ''))}")
    if meta.get("replay_of"):
        line(f"replay of {_field(_dict(meta['replay_of']).get('notebook'), 500)}")
    table = Table(show_lines=False)
    for column in ("#", "status", "duration", "calls", "program (first line)"):
        table.add_column(column)
    failed, total_calls = 0, 0
    decisions: dict[str, int] = {}
    code_cells = [c for c in map(_dict, nb["cells"]) if c.get("cell_type") == "code"]
    for index, cell in enumerate(code_cells, start=1):
        cg = _dict(_dict(cell.get("metadata")).get("cellgate"))
        status = _field(cg.get("status"), 40)
        failed += status != "ok"
        calls = _list(cg.get("calls"))
        total_calls += len(calls)
        source = _source(cell)
        first = _field(source.strip().splitlines()[0] if source.strip() else "", 60)
        table.add_row(str(index), Text(status, STATUS_STYLE.get(status, "white")), _duration(cell), str(len(calls)),
                      Text(first))
        for call in map(_dict, calls):
            decision = _field(call.get("decision"), 40)
            decisions[decision] = decisions.get(decision, 0) + 1
    console.print(table)
    for index, cell in enumerate(code_cells, start=1):
        cg = _dict(_dict(cell.get("metadata")).get("cellgate"))
        error = _dict(cg.get("error"))
        if error:
            evalue = str(error.get("evalue", "")).strip().splitlines()
            line(f"cell {index} ", (_field(error.get("ename"), 80), "red"), f": {_field(evalue[0] if evalue else '')}")
        calls = [_dict(c) for c in _list(cg.get("calls"))]
        shown = [c for c in calls if not c.get("ok")] + [c for c in calls if c.get("ok")][:5]
        if not calls:
            continue
        line(f"cell {index}: {len(calls)} call(s)" + (" (failures first, then the first 5)" if len(calls) > 5 else ""))
        for call in shown:
            outcome = ("ok", "green") if call.get("ok") else \
                (_field(_dict(call.get("error")).get("kind", call.get("outcome", "failed")), 40), "red")
            duration = call.get("duration_ms")
            took = f"{duration:.1f} ms" if isinstance(duration, (int, float)) and not isinstance(duration, bool) else "?"
            claims = claims_text(call)
            line(f"  #{_field(call.get('seq'), 20)} {_field(call.get('tool'), 100)} "
                 f"decision={_field(call.get('decision'), 40)} ", outcome, f" {took}",
                 (f" ({claims})" if claims else "", "dim"))
    line(f"totals: {len(code_cells)} cells ({failed} not ok), {total_calls} calls "
         f"({', '.join(f'{k}: {v}' for k, v in sorted(decisions.items(), key=str)) or 'none'})")
    agent = _dict(meta.get("agent"))
    if agent:
        usage = _dict(agent.get("usage"))
        ended = _dict(agent.get("ended")) or {"reason": "still running, or the host stopped"}
        line(f"agent: model {_field(agent.get('model'))}, mode {_field(agent.get('mode'))}, "
             f"{len(_list(agent.get('turns')))} turns, ended {_field(ended.get('reason'))}; "
             f"tokens in {_count(usage.get('input_tokens')):,} out {_count(usage.get('output_tokens')):,} "
             f"cache read {_count(usage.get('cache_read_input_tokens')):,} "
             f"cache write {_count(usage.get('cache_creation_input_tokens')):,}")
    return failed
