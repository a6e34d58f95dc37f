"""MCP tool names as Python identifiers (pure functions)."""

from __future__ import annotations

import keyword
import re

from cellgate.gate.ext import RESERVED_TOOL_NAMES

_NOT_WORD = re.compile(r"[^A-Za-z0-9_]+")


def identifier(name: str) -> str:
    """``create-task`` -> ``create_task``; ``2fa.check`` -> ``t_2fa_check``; ``class`` -> ``class_``."""
    text = _NOT_WORD.sub("_", name).strip("_")
    if not text or not text[0].isalpha():
        text = "t_" + text
    if keyword.iskeyword(text) or text in RESERVED_TOOL_NAMES or text == "aio":
        text += "_"
    return text


def python_names(names: list[str]) -> dict[str, str]:
    """Each MCP tool name -> a unique identifier; collisions get _2, _3 in sorted order of the names."""
    taken: set[str] = set()
    result = {}
    for name in sorted(names):
        base = candidate = identifier(name)
        counter = 2
        while candidate in taken:
            candidate, counter = f"{base}_{counter}", counter + 1
        taken.add(candidate)
        result[name] = candidate
    return result
