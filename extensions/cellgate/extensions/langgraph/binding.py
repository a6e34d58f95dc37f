"""Top-level names in the sandbox for the session's tools, as code-writing agents' prompts call them.

Only names are bound (``list_orders = tools.list_orders``): the tool's source never enters the sandbox, and every
call goes from the stub through the gate to the host.
"""

from __future__ import annotations

import keyword
from collections.abc import Iterable

from cellgate.gate import CellResult, ConfigError


def binding_code(names: Iterable[str]) -> str:
    """The cell that binds each name to its stub; refuses a name that is not a plain identifier."""
    lines = []
    for name in sorted(names):
        if not name.isidentifier() or keyword.iskeyword(name) or name == "tools":
            raise ConfigError(f"tool name {name!r} cannot be a top-level name in the sandbox; rename the tool "
                              "(letters, digits and _, not a keyword, not 'tools')")
        lines.append(f"{name} = tools.{name}")
    return "\n".join(lines)


def restarted(result: CellResult) -> bool:
    """The session restarted the kernel after this cell (the sandbox's memory, a message over the size bound):
    its variables, the bound names among them, are gone (docs: the sandbox's bounds)."""
    return result.status == "memory" or "message-size" in result.limits_hit


# For an agent with no way to send a retry (langgraph-codeact's scripts): what a failed cell's writes mean for it.
NO_RETRY = ("The next script runs every write again: make only the writes not listed as done above "
            "(committed), and check one of unknown outcome before making it.")


def writes_text(result: CellResult, retry_hint: str | None) -> str:
    """What the cell's writes did (``Writes.summary``): for a cell that did not end ok, or one with writes answered
    from the record or of unknown outcome; empty otherwise. ``retry_hint`` says how this agent retries (``call
    python again with retry: true``); None: it cannot, and a failed cell says what a re-run repeats instead."""
    writes = result.writes
    if result.ok and not (writes.answered or writes.unknown):
        return ""
    if retry_hint is not None:
        return writes.summary(failed_cell=not result.ok, retry_hint=retry_hint)
    summary = writes.summary(failed_cell=False)
    return f"{summary}\n{NO_RETRY}" if not result.ok and (writes.done or writes.unknown) else summary


def cell_text(result: CellResult, retry_hint: str | None = None) -> str:
    """What the agent reads back: the cell's printed text, then its error or why it ended, if it did not end ok,
    then what its writes did (``writes_text``)."""
    text = "".join(o.get("text", "") for o in result.outputs if o.get("output_type") == "stream")
    if not result.ok:
        error = result.error or {}
        if error:
            problem = f"{error.get('ename', 'Error')}: {error.get('evalue', '')}"
        else:
            hit = f" (limits hit: {', '.join(result.limits_hit)})" if result.limits_hit else ""
            problem = f"the cell ended {result.status}{hit}"
        text = f"{text}\n{problem}" if text else problem
    writes = writes_text(result, retry_hint)
    if not writes:
        return text
    return text.rstrip("\n") + "\n\n" + writes if text else writes
