"""`cellgate show`: a run summarised in the terminal (its notebook read by ``audit.notebook_file``).

The terminal view prints every recorded value as text (``rich.text.Text``, never markup) through
``terminal.reveal``, so a tampered notebook cannot move the cursor, write the clipboard or style text;
long values are shown head and tail. ``--json`` prints the same facts for scripts (``show_json``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cellgate.gate._errors import ConfigError
from cellgate.gate._terminal import head_and_tail, reveal, value_text
from cellgate.gate.audit import call_summary as cs
from cellgate.gate.audit.calls_view import claims_text, writes_note
from cellgate.gate.audit.notebook_file import notebook_json
from cellgate.gate.review.run_view import CellView, Note, Restart, RunView, read_run

CALLS_SHOWN = 10  # calls listed per cell unless --calls says otherwise
FORMAT = "cellgate.show/1"


NOTE_LABELS = {"session-paused": "paused", "session-resumed": "resumed", "session-forked": "forked",
               "trial-kept": "trial kept", "trial-discarded": "trial discarded", "session-continued": "continued",
               "plan-made": "plan made", "plan-applied": "plan applied", "session-ended": "goes on"}
SIBLINGS_READ = 200  # notebooks beside this one read to find a fork's, at most


def fork_notebooks(path: Path, checkpoint: str) -> list[str]:
    """The notebooks beside ``path`` that say they were forked from its checkpoint ``checkpoint``
    (``metadata.cellgate.forked_from``): where a fork's sessions went. Each is read as any notebook ``show`` reads
    (a regular file, with a cap); one that is not a readable audit notebook is passed over."""
    if not checkpoint:
        return []
    found = []
    try:
        siblings = sorted(p for p in path.parent.glob("*.ipynb") if p.name != path.name)[:SIBLINGS_READ]
    except OSError:
        return []
    for sibling in siblings:
        try:
            meta = cs.as_dict(cs.as_dict(notebook_json(sibling).get("metadata")).get("cellgate"))
        except (ConfigError, OSError):
            continue
        if cs.as_dict(meta.get("forked_from")).get("checkpoint") == checkpoint:
            found.append(sibling.name)
    return found


CHAIN_READ = 50  # notebooks a kept trial's continued_in chain is followed through, at most


def _plain_notebook(name: str) -> bool:
    return (name.endswith(".ipynb") and name.isprintable() and "/" not in name and "\\" not in name
            and not name.startswith("."))


def continued_chain(path: Path, run: RunView) -> tuple[list[tuple[Path, RunView]], str | None]:
    """The notebooks the session of ``path`` went on in, in order (each record ending ``session-ended`` with
    ``continued_in``, as a kept trial leaves its parent), and why the chain stops early, if it does. Only a plain
    ``*.ipynb`` name beside ``path`` is followed (never a path the record names elsewhere), only to a notebook
    whose own record says it continues the one before (``session-continued``), at most ``CHAIN_READ`` of them,
    each read as ``show`` reads any notebook. The notebooks are not verified here: ``cellgate verify`` checks the
    links against the signed journals."""
    found: list[tuple[Path, RunView]] = []
    seen, here, current = {path.name}, path, run
    while True:
        ended = [n for n in current.notes if n.kind == "session-ended" and n.notebooks]
        if not ended:
            return found, None
        name = ended[-1].notebooks[0]
        if not _plain_notebook(name):
            return found, (f"{here.name} says the session goes on in {_field(name, 200)!r}, which is not a plain "
                           "notebook name beside it; it is not followed")
        if name in seen:
            return found, f"{here.name} says the session goes on in {name}, a notebook already shown; not followed"
        if len(found) >= CHAIN_READ:
            return found, f"the chain goes on past {CHAIN_READ} notebooks; `cellgate show {name}` goes on from there"
        nxt = here.with_name(name)
        try:
            view = read(nxt)
        except (ConfigError, OSError) as exc:
            return found, f"{here.name} says the session goes on in {name}, which cannot be read: {_field(exc, 300)}"
        if not any(n.kind == "session-continued" and here.name in n.notebooks for n in view.notes):
            return found, (f"{here.name} says the session goes on in {name}, whose record does not say it continues "
                           f"{here.name}; it is not followed (`cellgate verify` checks the links)")
        found.append((nxt, view))
        seen.add(name)
        here, current = nxt, view


def where_to(note: Note, path: Path) -> tuple[str, ...]:
    """The notebooks a note's branch went to: a fork's found beside this one, else those the note names."""
    return tuple(fork_notebooks(path, note.checkpoint)) if note.kind == "session-forked" else note.notebooks


STATUS_STYLE = {"ok": "green", "error": "red", "interrupted": "yellow", "timeout": "red", "killed": "bold red",
                "kernel-died": "bold red", "memory": "bold red", "rejected": "yellow"}


def _field(value: Any, limit: int = 200) -> str:
    """A recorded value as one line a terminal shows as text (see ``terminal.reveal``), head and tail if long."""
    return head_and_tail(value if isinstance(value, str) else str(value), limit)


def calls_listed(cell: CellView, limit: int | None) -> tuple[list[dict[str, Any]], int]:
    """The calls a view lists of a cell (failures first, at most ``limit``; None: all) and how many it leaves out."""
    ordered = cs.failures_first(cell.calls) if limit is not None and len(cell.calls) > limit else cell.calls
    listed = [dict(c) for c in (ordered if limit is None else ordered[:limit])]
    return listed, len(cell.calls) - len(listed)


def _ms(value: Any) -> str:
    took = cs.number(value)
    return cs.format_duration(took / 1000) if took is not None else "?"


def _clock(value: Any) -> str:
    return cs.format_time(cs.parse_time(value), date=False)


def approval_text(call: dict[str, Any]) -> str:
    """Who answered a call's approval request and when, in one line; '' for a call no approver was asked."""
    asked = cs.approval(call)
    if asked is None:
        return ""
    said = {"approved": "approved it", "denied-by-approver": "denied it"}.get(cs.outcome(call))
    if asked.answered is not None:
        text = f"approver {_field(asked.approver, 100)} {said or 'answered'} at {cs.format_time(asked.answered, date=False)}"
    elif asked.withdrawn is not None:
        text = f"approver {_field(asked.approver, 100)} was asked; withdrawn at {cs.format_time(asked.withdrawn, date=False)}"
    else:
        text = f"approver {_field(asked.approver, 100)} was asked; no answer"
    if asked.waited is not None:
        text += f", {cs.format_duration(asked.waited)} after the request"
    return text + (f": {_field(asked.reason, 200)}" if asked.reason else "")


def _tool_table(calls: list[dict[str, Any]]) -> Table:
    table = Table(title="calls per tool", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("tool", "calls", "failed", "outcomes", "time", "longest"):
        table.add_column(column)
    for row in cs.by_tool(calls):
        outcomes = ", ".join(f"{cs.LABELS[k]} {n}" for k, n in sorted(row.outcomes.items(), key=lambda i: cs.OUTCOMES.index(i[0])))
        table.add_row(Text(_field(row.tool, 60)), str(row.calls), str(row.failed), outcomes,
                      cs.format_duration(row.total_ms / 1000), cs.format_duration(row.max_ms / 1000))
    return table


class _Printer:
    """The terminal view: one method per part, every recorded value as text."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def line(self, *parts: str | tuple[str, str]) -> None:
        self.console.print(Text.assemble(*parts), soft_wrap=True)

    def header(self, run: RunView, path: Path) -> None:
        sandbox = cs.as_dict(run.meta.get("sandbox"))
        self.line((_field(path.name), "bold"), f"  session {_field(run.meta.get('session_id', '?'))[:12]}  "
                  f"sandbox {_field(sandbox.get('runtime', sandbox.get('isolation', '?')))} "
                  f"{_field(sandbox.get('runsc_version', ''))} {_field(sandbox.get('platform', ''))}")
        if run.principal is not None:
            self.line(f"principal: {_field(run.principal, 300)}")
        if run.trace_id is not None:
            self.line(f"trace: {run.trace_id} (OpenTelemetry)")
        forked = cs.as_dict(run.meta.get("forked_from"))
        if forked:
            number, of = forked.get("fork"), forked.get("of")
            self.line(f"forked from {_field(Path(cs.text_of(forked.get('notebook')) or '?').name, 300)}"
                      + (f" (fork {number} of {of})" if isinstance(number, int) and isinstance(of, int) else ""))
        if run.meta.get("replay_of"):
            self.line(f"replay of {_field(cs.as_dict(run.meta['replay_of']).get('notebook'), 500)}")
        self.line(f"run: {cs.format_time(run.started)} to {cs.format_time(run.ended)} "
                  f"({cs.format_duration(run.seconds)}; the first cell's start to the last cell's end)")

    def cells_table(self, run: RunView, path: Path) -> None:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)  # no column rules: the program keeps its room in 80 columns
        table.add_column("#", justify="right")
        table.add_column("status", overflow="fold", max_width=12)
        for column in ("started", "took", "calls"):
            table.add_column(column)
        table.add_column("program", min_width=30, overflow="fold")
        for cell in run.cells:
            self._marks(table, run, cell.number - 1, path)
            status = _field(cell.status, 40)
            late = ", ".join(f"{n} late {what}{'s' if n > 1 else ''}" for n, what in (
                (len(cell.late_outputs), "output"), (len(cell.late_calls), "call")) if n)
            program = Text(_field(cell.title, 60))
            if late:
                program.append(f"\n{late}", "yellow")
            table.add_row(str(cell.number), Text(status, STATUS_STYLE.get(status, "white")),
                          cs.format_time(cell.started, date=False), cs.format_duration(cell.seconds),
                          str(len(cell.calls)), program)
        self._marks(table, run, len(run.cells), path)
        self.console.print(table)

    def _marks(self, table: Table, run: RunView, after: int, path: Path) -> None:
        """The restarts and branch notes recorded after code cell ``after``, in their order."""
        for mark in run.marks:
            if mark.after != after:
                continue
            if isinstance(mark, Restart):
                self._restart_row(table, mark)
            else:
                self._note_row(table, mark, path)

    @staticmethod
    def _note_row(table: Table, note: Note, path: Path) -> None:
        text = Text(_field(note.text, 400))
        if note.kind == "session-forked":
            went = where_to(note, path)
            text.append("\nforks: " + (", ".join(_field(name, 200) for name in went) if went else
                                        "no fork's notebook found beside this one"), "cyan")
        table.add_row("", Text(NOTE_LABELS.get(note.kind, note.kind), "cyan"), "", "", "", text)

    @staticmethod
    def _restart_row(table: Table, restart: Restart) -> None:
        table.add_row("", Text("restart", "bold red" if restart.memory else "yellow"), "", "", "",
                      Text(f"kernel restarted ({_field(restart.reason, 40)})"))

    def cell_details(self, cell: CellView, limit: int | None, program: bool) -> None:
        count = len(cell.calls)
        self.line((f"cell {cell.number}", "bold"), " ", (_field(cell.status, 40), STATUS_STYLE.get(cell.status, "")),
                  f"  started {cs.format_time(cell.started, date=False)}, took {cs.format_duration(cell.seconds)}, "
                  f"{count} call{'' if count == 1 else 's'}"
                  + (f", limits hit: {_field(', '.join(cell.limits_hit), 200)}" if cell.limits_hit else ""))
        if program:
            lines = cell.source.splitlines() or [""]
            for number, text in enumerate(lines[:200], start=1):
                self.line((f"  {number:>3} ", "dim"), reveal(text[:2000], compress=False))
            if len(lines) > 200:
                self.line(f"  … {len(lines) - 200} more lines (in the notebook)")
        if cell.error:
            ename, evalue = cell.error
            first = evalue.strip().splitlines()
            self.line("  raised ", (_field(ename, 80), "red"), f": {_field(first[0])}" if first else "")
        for number, text in enumerate(writes_note(cell.calls, cell.status)):  # what its failure left done
            self.line("  ", (_field(text, 600), "yellow") if number == 0 else _field(text, 600))
        if cell.late_outputs:
            self.line(("  late output: ", "yellow"), f"{len(cell.late_outputs)} output(s) printed after the cell ended "
                      "by work it started (metadata.cellgate.late_outputs)")
        listed, left_out = calls_listed(cell, limit)
        for call in listed:
            self.call(call, cell)
        if left_out:
            self.line(f"  … {left_out} more call{'' if left_out == 1 else 's'} of cell {cell.number} not shown "
                      f"(failures are listed first); --calls all lists every call")

    def call(self, call: dict[str, Any], cell: CellView) -> None:
        found = cs.outcome(call)
        failed = cs.is_failure(found)
        shown = ("ok", "green") if call.get("ok") is True else (found, "red" if failed else "yellow")
        rule = call.get("rule")
        self.line(f"  #{_field(call.get('seq'), 20)} {_field(call.get('tool'), 100)} "
                  f"decision={_field(cs.decision(call), 40)} ", shown,
                  f" {_ms(call.get('duration_ms'))} at {_clock(call.get('started'))}"
                  + (f", rule {_field(rule, 120)}" if isinstance(rule, str) and rule else ""),
                  (" LATE: finished after its cell ended" if cs.is_late(call, cell.meta.get("ended")) else "", "yellow"))
        self.line(("      args ", "dim"), value_text(call.get("args"), 300))
        approved = approval_text(call)
        if approved:
            self.line(("      ", ""), approved)
        exception = cs.exception_name(call)
        if exception is not None or found == "unknown":
            self.line("      ", (exception or "unknown", "red"), f": {_field(cs.error_message(call), 400)}")
        claims = claims_text(call)
        if claims:
            self.line(("      " + claims, "dim"))

    def totals(self, run: RunView) -> None:
        failed = sum(cell.status != "ok" for cell in run.cells)
        decisions = ", ".join(f"{_field(k, 40)}: {v}" for k, v in cs.by_decision(run.calls).items())
        self.line(f"totals: {len(run.cells)} cells ({failed} not ok), {len(run.calls)} calls ({decisions or 'none'})")
        if run.calls:
            self.line("outcomes: " + ", ".join(f"{cs.LABELS[k]} {n}" for k, n in cs.by_outcome(run.calls).items()))
            self.console.print(_tool_table(run.calls))

    def agent(self, run: RunView) -> None:
        agent = cs.as_dict(run.meta.get("agent"))
        if not agent:
            return
        usage = cs.as_dict(agent.get("usage"))
        ended = cs.as_dict(agent.get("ended")) or {"reason": "still running, or the host stopped"}
        self.line(f"agent: model {_field(agent.get('model'))}, mode {_field(agent.get('mode'))}, "
                  f"{len(cs.as_list(agent.get('turns')))} turns, ended {_field(ended.get('reason'))}; "
                  f"tokens in {cs.count(usage.get('input_tokens')):,} out {cs.count(usage.get('output_tokens')):,} "
                  f"cache read {cs.count(usage.get('cache_read_input_tokens')):,} "
                  f"cache write {cs.count(usage.get('cache_creation_input_tokens')):,}")


def read(path: Path) -> RunView:
    return read_run(notebook_json(path), path.name)


def select_cell(run: RunView, number: int | None) -> CellView | None:
    if number is None:
        return None
    try:
        return run.cell(number)
    except ValueError as exc:
        raise ConfigError(f"--cell {number}: {exc}; `cellgate show {run.name}` lists them") from None


def show(path: Path, console: Console | None = None, *, cell: int | None = None,
         calls: int | None = CALLS_SHOWN) -> int:
    """A terminal summary of a run (or of one cell, with its program); returns the number of cells shown that
    did not end ok. ``calls``: calls listed per cell, failures first (None: all)."""
    printer = _Printer(console or Console(highlight=False))
    run = read(path)
    chosen = select_cell(run, cell)
    printer.header(run, path)
    if chosen is not None:
        for mark in run.marks:
            if mark.after != chosen.number - 1:
                continue
            if isinstance(mark, Restart):
                printer.line(("kernel restarted", "bold red" if mark.memory else "yellow"),
                             f" ({_field(mark.reason, 40)}) before this cell")
            else:
                printer.line((NOTE_LABELS.get(mark.kind, mark.kind), "cyan"), f" before this cell: {_field(mark.text, 400)}")
        printer.cell_details(chosen, calls, program=True)
        if chosen.calls:
            printer.console.print(_tool_table(chosen.calls))
        return int(chosen.status != "ok")
    chain, problem = continued_chain(path, run)
    not_ok = 0
    for here, view in [(path, run), *chain]:
        if here is not path:
            printer.line(("the session goes on in ", "bold cyan"), (_field(here.name), "bold"),
                         f" ({len(view.cells)} cells)")
        printer.cells_table(view, here)
        for each in view.cells:
            if each.error or each.calls or each.late_outputs:
                printer.cell_details(each, calls, program=False)
        not_ok += sum(each.status != "ok" for each in view.cells)
    if problem:
        printer.line(("the chain stops: ", "bold red"), problem)
    if chain:
        printer.line(f"read in order: {' -> '.join(_field(p.name, 200) for p in [path, *(h for h, _ in chain)])} "
                     f"({sum(len(v.cells) for _, v in [(path, run), *chain])} cells)")
    printer.totals(replace(run, cells=[c for v in [run, *(v for _, v in chain)] for c in v.cells]))  # the chain's
    printer.agent(run)
    return not_ok


__all__ = ["CALLS_SHOWN", "CHAIN_READ", "NOTE_LABELS", "approval_text", "calls_listed", "continued_chain",
           "fork_notebooks", "where_to",
           "read", "select_cell", "show"]
