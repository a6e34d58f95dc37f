"""What the model is offered: the system prompt and the tool definitions (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cellgate.gate.ext import stub_signature

RETRY_DESCRIPTION = ("true: this cell retries the last failed cell: writes it already made are answered from the "
                     "record, not repeated; false runs everything again")
EXECUTE_PYTHON: dict[str, Any] = {
    "name": "execute_python",
    "description": (
        "Run a Python program as one cell of a stateful, sandboxed IPython kernel and get back what it printed "
        "(stdout, stderr, the value of the last expression, or the error). Variables persist between calls. "
        "The module `tools` is preloaded; its functions call the operator's tools through a gate."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "The Python program to run."},
            "retry": {"type": "boolean", "default": False, "description": RETRY_DESCRIPTION},
        },
        "required": ["code"],
    },
}
# How the model retries a failed cell, as the writes summary of its tool_result tells it (``Writes.summary``).
RETRY_HINT = "call execute_python again with retry: true"

CODE_GUIDE = """\
You solve the task by writing Python programs and running them with the execute_python tool.
The programs run in a sandboxed, stateful IPython kernel: no network, no host files; variables persist between runs.
The preloaded module `tools` calls the operator's tools. Each call is checked by a gate (policy, budgets, approvals) and recorded; a refused call raises an exception (a subclass of tools.ToolError) with the reason.
Work in code: fetch, filter, join and loop inside one program, and print only what you need, compactly. What the program prints is all you see of its data, so never print whole datasets.
A failed program's result lists the writes it already made; send the fixed program with retry: true and they are answered from the record, not made again.
"""


def one_line(description: str) -> str:
    first = description.strip().splitlines()[0] if description.strip() else ""
    return first[:200]


def tool_line(entry: dict[str, Any]) -> str:
    """``tools.list_orders(month: str): All orders placed in a month…``"""
    return f"- tools.{entry['name']}{stub_signature(entry, shown=True)}: {one_line(entry.get('description', ''))}"


def system_prompt(code_tools: list[dict[str, Any]], direct_tools: list[dict[str, Any]], search_threshold: int) -> str:
    """The system prompt: how to use ``tools`` compactly, and which tools there are."""
    parts = []
    if code_tools or not direct_tools:
        parts.append(CODE_GUIDE.strip())
        if len(code_tools) > search_threshold:
            parts.append(f"There are {len(code_tools)} tools. Find them with `tools.search('words')` (names and one-line "
                         "descriptions) and read one with `tools.describe('name')` (signature and full documentation) "
                         "before calling it.")
        elif code_tools:
            parts.append("The tools (call them as shown; keyword arguments work):\n"
                         + "\n".join(tool_line(entry) for entry in code_tools))
        else:
            parts.append("No tools are configured; `tools` is empty.")
    if direct_tools:
        names = ", ".join(api_name(entry["name"]) for entry in direct_tools)
        parts.append(f"These tools are not in `tools`: call them yourself, as tools of your own turn: {names}. "
                     "Each call is checked by the same gate.")
    return "\n\n".join(parts)


def api_name(name: str) -> str:
    """A tool name as the Messages API allows it (``^[a-zA-Z0-9_-]{1,64}$``): ``crm.create_task`` -> ``crm__create_task``."""
    return name.replace(".", "__")


def direct_definitions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tools offered to the model as ordinary Anthropic tools."""
    return [{"name": api_name(entry["name"]), "description": entry.get("description") or entry["name"],
             "input_schema": entry["parameters"]} for entry in tools]


def split_tools(manifest: list[dict[str, Any]], exposure: Mapping[str, str], mode: str) -> tuple[list[dict[str, Any]],
                                                                                              list[dict[str, Any]]]:
    """(tools the model reaches from code, tools it calls directly) for a mode.

    ``code``: every tool exposed to code; ``direct``: every tool as a direct
    tool; ``hybrid``: each tool's ``expose`` setting (``code``, ``direct``, ``both``).
    """
    if mode == "direct":
        return [], list(manifest)
    code = [e for e in manifest if exposure.get(e["name"], "code") in ("code", "both")]
    if mode == "code":
        return code, []
    return code, [e for e in manifest if exposure.get(e["name"], "code") in ("direct", "both")]
