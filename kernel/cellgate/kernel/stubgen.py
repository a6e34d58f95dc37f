"""Generate the ``tools`` package that the sandboxed kernel preloads.

A pure function of the tool manifest: the same manifest always gives the same
source, byte for byte (it is snapshot-tested). Each tool becomes a sync
function with a real signature and docstring, so ``help(tools.x)`` and tab
completion work; ``tools.aio`` holds async twins; ``tools.search()`` and
``tools.describe()`` are for discovery when the set is large.

A manifest entry is ``{"name", "description", "parameters", "order"}``, where
``parameters`` is the JSON Schema (an object schema) of the tool's arguments
and the optional ``order`` lists their names in signature order.
Every string from the manifest reaches the source only through ``repr()``,
and names must be plain identifiers, so a hostile tool description cannot
inject code into the stubs.
"""

from __future__ import annotations

import json
import keyword
import re
from typing import Any

RESERVED = frozenset({"search", "describe", "aio", "ToolError", "ReplayDivergence"})
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

_SIMPLE_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}


def check_identifier(name: str, what: str) -> None:
    if not _IDENTIFIER.match(name) or keyword.iskeyword(name):
        raise ValueError(
            f"{what} {name!r} is not a Python identifier (letters, digits and _, "
            "starting with a letter); rename it"
        )


def annotation(schema: Any) -> str:
    """A Python annotation for a JSON Schema, as source text."""
    if not isinstance(schema, dict):
        return "_t.Any"
    for union_key in ("anyOf", "oneOf"):
        if isinstance(schema.get(union_key), list):
            parts = [annotation(s) for s in schema[union_key]]
            if "_t.Any" in parts:
                return "_t.Any"
            return " | ".join(dict.fromkeys(parts))
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, (str, int, bool)) or v is None for v in enum):
        return "_t.Literal[" + ", ".join(repr(v) for v in enum) + "]"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(dict.fromkeys(annotation({**schema, "type": k}) for k in kind))
    if kind in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind]
    if kind == "array":
        return f"list[{annotation(schema.get('items'))}]"
    if kind == "object":
        return "dict[str, _t.Any]"
    return "_t.Any"


def _parameters(tool: dict[str, Any]) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    """(name, annotation, default source or None, schema), required ones first."""
    schema = tool.get("parameters") or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    order = tool.get("order")
    names = [n for n in order if n in properties] if isinstance(order, list) else list(properties)
    names += [n for n in properties if n not in names]
    params = []
    for name in names:
        prop = properties[name]
        check_identifier(name, f"parameter of tool {tool['name']!r}")
        prop = prop if isinstance(prop, dict) else {}
        if name in required:
            default = None
        elif "default" in prop:
            default = repr(prop["default"])
        else:
            default = "_runtime.OMIT"
        params.append((name, annotation(prop), default, prop))
    params.sort(key=lambda p: p[2] is not None)  # stable: keeps schema order within each group
    return params


def signature(tool: dict[str, Any]) -> str:
    """The signature text, e.g. ``(month: str, limit: int = 10)``."""
    parts = []
    for name, note, default, _ in _parameters(tool):
        parts.append(f"{name}: {note}" + (f" = {default}" if default is not None else ""))
    return "(" + ", ".join(parts) + ")"


def docstring(tool: dict[str, Any]) -> str:
    text = str(tool.get("description") or "").strip() or f"Call the {tool['name']} tool."
    lines = []
    for name, note, _, prop in _parameters(tool):
        described = str(prop.get("description") or "").strip()
        lines.append(f"    {name} ({note}): {described}".rstrip())
    if lines:
        text += "\n\nArgs:\n" + "\n".join(lines)
    return text


def _function(tool: dict[str, Any], asynchronous: bool) -> str:
    name = tool["name"]
    params = _parameters(tool)
    call_args = "{" + ", ".join(f"{p[0]!r}: {p[0]}" for p in params) + "}"
    if asynchronous:
        head, body = "async def", f"return await _runtime.acall({name!r}, {call_args})"
    else:
        head, body = "def", f"return _runtime.call({name!r}, {call_args})"
    return f"{head} {name}{signature(tool)} -> _t.Any:\n    {docstring(tool)!r}\n    {body}\n"


def validate_manifest(manifest: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for tool in manifest:
        name = tool["name"]
        check_identifier(name, "tool name")
        if name in RESERVED:
            raise ValueError(f"tool name {name!r} is reserved by the tools module; rename it")
        if name in seen:
            raise ValueError(f"tool name {name!r} appears twice; tool names must be unique")
        seen.add(name)
        _parameters(tool)


def generate(manifest: list[dict[str, Any]]) -> dict[str, str]:
    """The files of the ``tools`` package: {relative path: source}."""
    validate_manifest(manifest)
    tools = sorted(manifest, key=lambda t: t["name"])
    names = [t["name"] for t in tools]
    manifest_json = json.dumps(tools, sort_keys=True, separators=(",", ":"))
    header = (
        "# Generated by cellgate from the session's tool manifest; do not edit.\n"
        "import typing as _t\n\n"
        "from cellgate.kernel import runtime as _runtime\n"
    )
    init = [
        '"""The tools of this cellgate session.\n\n'
        "Every call goes to the host gate, which decides, validates, runs and\n"
        "records it. ``search(query)`` and ``describe(name)`` help find tools;\n"
        '``tools.aio`` holds async twins for ``asyncio.gather``.\n"""\n',
        header,
        "from cellgate.kernel.errors import (  # noqa: F401  (re-exported for except clauses)\n"
        "    ReplayDivergence, ToolBudgetExceeded, ToolDenied, ToolError, ToolNotFound, ToolRateLimited,\n"
        "    ToolTimeout, ToolUnavailable, ToolValidationError,\n"
        ")\n\n"
        f"_MANIFEST = _runtime.load_manifest({manifest_json!r})\n"
        f"_SIGNATURES = {dict((t['name'], signature(t).replace('_t.', '')) for t in tools)!r}\n\n",
    ]
    init += [_function(t, asynchronous=False) + "\n" for t in tools]
    init.append(
        "def search(query: str = '') -> list[str]:\n"
        "    'Names and one-line summaries of the tools whose name or description has every word of query.'\n"
        "    return _runtime.search(_MANIFEST, query)\n\n"
        "def describe(name: str) -> str:\n"
        "    'The signature and full description of the tool called name.'\n"
        "    return _runtime.describe(_MANIFEST, _SIGNATURES, name)\n\n"
        "from . import aio  # noqa: E402\n\n"
        f"__all__ = {sorted(names + ['search', 'describe', 'aio'])!r}\n"
    )
    aio = ['"""Async twins of the session\'s tools, for asyncio.gather."""\n', header, "\n"]
    aio += [_function(t, asynchronous=True) + "\n" for t in tools]
    aio.append(f"__all__ = {names!r}\n")
    return {"tools/__init__.py": "".join(init), "tools/aio.py": "".join(aio)}
