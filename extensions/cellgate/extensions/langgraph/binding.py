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


def cell_text(result: CellResult) -> str:
    """What the agent reads back: the cell's printed text, then its error or why it ended, if it did not end ok."""
    text = "".join(o.get("text", "") for o in result.outputs if o.get("output_type") == "stream")
    if result.ok:
        return text
    error = result.error or {}
    if error:
        problem = f"{error.get('ename', 'Error')}: {error.get('evalue', '')}"
    else:
        hit = f" (limits hit: {', '.join(result.limits_hit)})" if result.limits_hit else ""
        problem = f"the cell ended {result.status}{hit}"
    return f"{text}\n{problem}" if text else problem
