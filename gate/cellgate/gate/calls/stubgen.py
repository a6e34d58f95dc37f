"""Generate the ``tools`` package that the sandboxed kernel preloads.

A pure function of the tool manifest: the same manifest always gives the same
source, byte for byte (it is snapshot-tested). Each tool becomes a sync
function with a real signature and docstring, so ``help(tools.x)`` and tab
completion work; ``tools.aio`` holds async twins; ``tools.search()`` and
``tools.describe()`` are for discovery when the set is large; ``tools.ptc``
holds each top-level tool as ``async def name(args: dict) -> str`` (the style
of Anthropic's programmatic tool calling: one dict in, JSON text out), which
the kernel also puts in the user namespace when ``call_style="ptc"``.

A manifest entry is ``{"name", "description", "parameters", "order"}``, where
``parameters`` is the JSON Schema (an object schema) of the tool's arguments
and the optional ``order`` lists their names in signature order; an optional
``returns`` (an object schema, e.g. an MCP tool's outputSchema) becomes a
``TypedDict`` return type. A name ``ns.tool`` puts the tool in the subpackage
``tools.ns`` (with its own ``aio`` twins), as MCP servers' tools are.
Every string from the manifest reaches the source only through ``repr()``
(a docstring line by line, each escaped as ``repr()`` escapes it, so that
``help()`` shows real lines), and names must be plain identifiers, so a
hostile tool description cannot inject code into the stubs.

What people read (``help()``, ``tools.describe()``, the docstrings' Args)
shows annotations as ``typing`` prints them (``Literal['a', 'b']``); the
source spells them ``_t.Literal[...]``.
"""

from __future__ import annotations

import json
import keyword
import re
from typing import Any

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls import effects

RESERVED = frozenset({"search", "describe", "aio", "ptc", "ToolError", "ReplayDivergence"})
CALL_STYLES = ("module", "ptc")  # [tools] call_style
PTC_NOTE = ("Programmatic-tool-calling style: pass one dict of the arguments above; the result comes back as "
            "JSON text (a str result as it is).")
# A session without tools says why at the first use of one. No host path: the sandbox gets none (the banner has it).
NO_TOOLS = (
    "no tools are configured (no cellgate.toml in the folder the kernel started in and CELLGATE_CONFIG unset, "
    "or its [tools] modules list is empty); create one (see README, Configuration), then start a new kernel"
)


def _missing(names: list[str], why: str = "") -> str:
    """A module's ``__getattr__``: a name it lacks raises ``ToolNotFound`` (an AttributeError), as README says."""
    return (f"\n\ndef __getattr__(name: str) -> _t.NoReturn:\n"
            f"    raise _runtime.missing(__name__, name, {sorted(names)!r}{f', {why!r}' if why else ''})\n")


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
        raise ConfigError(
            f"{what} {name!r} is not a Python identifier (letters, digits and _, "
            "starting with a letter); rename it"
        )


def annotation(schema: Any, typing: str = "_t.") -> str:
    """A Python annotation for a JSON Schema, as source text (``typing=""``: as people read it)."""
    any_ = f"{typing}Any"
    if not isinstance(schema, dict):
        return any_
    for union_key in ("anyOf", "oneOf"):
        if isinstance(schema.get(union_key), list):
            parts = [annotation(s, typing) for s in schema[union_key]]
            if any_ in parts:
                return any_
            return " | ".join(dict.fromkeys(parts))
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, (str, int, bool)) or v is None for v in enum):
        return f"{typing}Literal[" + ", ".join(repr(v) for v in enum) + "]"
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(dict.fromkeys(annotation({**schema, "type": k}, typing) for k in kind))
    if kind in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[kind]
    if kind == "array":
        return f"list[{annotation(schema.get('items'), typing)}]"
    if kind == "object":
        return f"dict[str, {any_}]"
    return any_


def _parameters(tool: dict[str, Any], shown: bool = False) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    """(name, annotation, default or None, schema), required ones first; as source, or as people read it."""
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
            default = "OMIT" if shown else "_runtime.OMIT"
        params.append((name, annotation(prop, "" if shown else "_t."), default, prop))
    params.sort(key=lambda p: p[2] is not None)  # stable: keeps schema order within each group
    return params


def signature(tool: dict[str, Any], shown: bool = False) -> str:
    """The signature's source, e.g. ``(kind: _t.Literal['a', 'b'], limit: int = 10)``; ``shown``: as people
    read it, ``(kind: Literal['a', 'b'], limit: int = 10)``."""
    parts = []
    for name, note, default, _ in _parameters(tool, shown):
        parts.append(f"{name}: {note}" + (f" = {default}" if default is not None else ""))
    return "(" + ", ".join(parts) + ")"


def docstring(tool: dict[str, Any]) -> str:
    text = str(tool.get("description") or "").strip() or f"Call the {tool['name']} tool."
    lines = []
    for name, note, _, prop in _parameters(tool, shown=True):
        described = str(prop.get("description") or "").strip()
        lines.append(f"    {name} ({note}): {described}".rstrip())
    if lines:
        text += "\n\nArgs:\n" + "\n".join(lines)
    effect = str(tool.get("effect") or effects.DEFAULT)
    if effect in effects.MEANING:
        text += f"\n\nEffect: {effect} ({effects.MEANING[effect]})."
    return text


def docstring_literal(text: str, indent: str = "    ") -> str:
    """``text`` as a triple-quoted literal with real line breaks, its lines after the first indented by ``indent``.

    Each line is escaped as ``repr()`` escapes it, plus every ``"``, so no text
    can end the literal early; ``help()`` cleans the indentation off again.
    """
    lines = []
    for line in text.split("\n"):
        quoted = repr(line)
        lines.append(quoted[1:-1].replace('"', '\\"') if quoted[0] == "'" else quoted[1:-1])
    if len(lines) == 1:
        return f'"""{lines[0]}"""'
    rest = "\n".join(f"{indent}{line}" if line else "" for line in lines[1:])
    return f'"""{lines[0]}\n{rest}\n{indent}"""'


def result_type_name(tool: dict[str, Any]) -> str | None:
    """The TypedDict a tool with a declared object result returns, e.g. ``LookupCustomerResult``."""
    returns = tool.get("returns")
    if not isinstance(returns, dict) or not isinstance(returns.get("properties"), dict):
        return None
    short = tool["name"].rpartition(".")[2]
    return "".join(part[:1].upper() + part[1:] for part in short.split("_") if part) + "Result"


def result_type(tool: dict[str, Any]) -> str:
    """``X = _t.TypedDict('X', {...})``: the functional form takes any key, safely through repr()."""
    name = result_type_name(tool)
    returns = tool["returns"]
    required = set(returns.get("required") or [])
    fields = []
    for key, prop in returns["properties"].items():
        note = annotation(prop)
        fields.append(f"{str(key)!r}: {note if key in required else f'_t.NotRequired[{note}]'}")
    return f"{name} = _t.TypedDict({name!r}, {{{', '.join(fields)}}})\n"


def _function(tool: dict[str, Any], asynchronous: bool) -> str:
    name = tool["name"]
    short = name.rpartition(".")[2]
    params = _parameters(tool)
    call_args = "{" + ", ".join(f"{p[0]!r}: {p[0]}" for p in params) + "}"
    returns = result_type_name(tool) or annotation(tool.get("returns"))
    if asynchronous:
        head, body = "async def", f"return await _runtime.acall({name!r}, {call_args})"
    else:
        head, body = "def", f"return _runtime.call({name!r}, {call_args})"
    return f"{head} {short}{signature(tool)} -> {returns}:\n    {docstring_literal(docstring(tool))}\n    {body}\n"


def _ptc_function(tool: dict[str, Any]) -> str:
    name = tool["name"]
    doc = docstring_literal(f"{docstring(tool)}\n\n{PTC_NOTE}")
    return (f"async def {name}(args: dict[str, _t.Any] | None = None) -> str:\n    {doc}\n"
            f"    return await _ptc.call({name!r}, args)\n")


def _ptc_module(tools: list[dict[str, Any]], header: str) -> str:
    names = [t["name"] for t in tools]
    return "".join([
        '"""The session\'s tools in the style of Anthropic\'s programmatic tool calling.\n\n'
        "Each is ``async def name(args: dict) -> str``: one dict of arguments in, the result as JSON text out,\n"
        "gated and recorded like every other call (``from tools.ptc import *``, or ``[tools] call_style =\n"
        '\"ptc\"`` to have them in the namespace already)."""\n',
        header, "from cellgate.kernel import ptc as _ptc\n\n\n",
        *(_ptc_function(t) + "\n" for t in tools),
        f"__all__ = {names!r}\n", _missing(names)])


def validate_manifest(manifest: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    top = {t["name"] for t in manifest if "." not in t["name"]}
    for tool in manifest:
        name = tool["name"]
        namespace, _, short = name.rpartition(".")
        if namespace:
            check_identifier(namespace, "tool namespace")
            if namespace in RESERVED or namespace in top:
                raise ConfigError(f"tool namespace {namespace!r} collides with a name in the tools module; rename it")
        check_identifier(short, "tool name")
        if short in RESERVED or (namespace and short == "aio"):
            raise ConfigError(f"tool name {name!r} is reserved by the tools module; rename it")
        if name in seen:
            raise ConfigError(f"tool name {name!r} appears twice; tool names must be unique")
        seen.add(name)
        _parameters(tool)


def _module(tools: list[dict[str, Any]], header: str, doc: str, asynchronous: bool, extra_all: list[str]) -> str:
    """One module of functions (and their result TypedDicts)."""
    parts = [doc, header, "\n"]
    typed = [t for t in tools if result_type_name(t)]
    if typed and not asynchronous:
        parts += [result_type(t) for t in typed] + ["\n"]
    elif typed:
        parts.append("from . import " + ", ".join(sorted({str(result_type_name(t)) for t in typed})) + "\n\n")
    parts += [_function(t, asynchronous) + "\n" for t in tools]
    names = [t["name"].rpartition(".")[2] for t in tools]
    typed_names = [] if asynchronous else [str(result_type_name(t)) for t in typed]
    parts.append(f"__all__ = {sorted(names + typed_names + extra_all)!r}\n")
    parts.append(_missing(names))
    return "".join(parts)


def generate(manifest: list[dict[str, Any]], call_style: str = "module") -> dict[str, str]:
    """The files of the ``tools`` package: {relative path: source}; ``call_style`` ([tools] call_style): "ptc"
    has the kernel put ``tools.ptc``'s functions in the user namespace."""
    if call_style not in CALL_STYLES:
        raise ConfigError(f"call_style {call_style!r} is not one of {', '.join(CALL_STYLES)}; fix [tools] call_style")
    validate_manifest(manifest)
    tools = sorted((t for t in manifest if "." not in t["name"]), key=lambda t: t["name"])
    names = [t["name"] for t in tools]
    everything = sorted(manifest, key=lambda t: t["name"])
    namespaces: dict[str, list[dict[str, Any]]] = {}
    for tool in everything:
        if "." in tool["name"]:
            namespaces.setdefault(tool["name"].partition(".")[0], []).append(tool)
    manifest_json = json.dumps(everything, sort_keys=True, separators=(",", ":"))
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
        "    OutcomeUnknown, ReplayDivergence, ToolBudgetExceeded, ToolBusy, ToolDenied, ToolError, ToolNotFound,\n"
        "    ToolRateLimited, ToolTimeout, ToolUnavailable, ToolValidationError,\n"
        ")\n\n"
        f"_MANIFEST = _runtime.load_manifest({manifest_json!r})\n"
        f"_SIGNATURES = { {t['name']: signature(t, shown=True) for t in everything}!r}\n\n",
    ]
    init += [result_type(t) for t in tools if result_type_name(t)]
    init += [_function(t, asynchronous=False) + "\n" for t in tools]
    init.append(
        "def search(query: str = '') -> list[str]:\n"
        "    'Names and one-line summaries of the tools whose name or description has every word of query.'\n"
        "    return _runtime.search(_MANIFEST, query)\n\n"
        "def describe(name: str) -> str:\n"
        "    'The signature and full description of the tool called name.'\n"
        "    return _runtime.describe(_MANIFEST, _SIGNATURES, name, __name__)\n\n"
        "from . import aio, ptc  # noqa: E402\n"
        + "".join(f"from . import {ns}  # noqa: E402\n" for ns in namespaces)
        + "\n"
        f"__all__ = {sorted(names + [str(result_type_name(t)) for t in tools if result_type_name(t)] + ['search', 'describe', 'aio', 'ptc'] + list(namespaces))!r}\n"
    )
    if call_style != "module":  # read by the kernel when it preloads the package (kernel.CellgateKernel)
        init.append(f"__cellgate_call_style__ = {call_style!r}\n")
    init.append(_missing([t["name"] for t in everything], "" if manifest else NO_TOOLS))
    aio = ['"""Async twins of the session\'s tools, for asyncio.gather."""\n', header, "\n"]
    typed = sorted({str(result_type_name(t)) for t in tools if result_type_name(t)})
    if typed:
        aio.append(f"from . import {', '.join(typed)}\n\n")
    aio += [_function(t, asynchronous=True) + "\n" for t in tools]
    aio.append(f"__all__ = {names!r}\n")
    aio.append(_missing(names))
    files = {"tools/__init__.py": "".join(init), "tools/aio.py": "".join(aio), "tools/ptc.py": _ptc_module(tools, header)}
    for ns, members in namespaces.items():
        doc = f'"""Tools of {ns} (an MCP server or other source), called through the host gate."""\n'
        files[f"tools/{ns}/__init__.py"] = _module(members, header, doc, False, ["aio"]).replace(
            "\n__all__", "\nfrom . import aio  # noqa: E402\n\n__all__", 1)
        files[f"tools/{ns}/aio.py"] = _module(members, header, f'"""Async twins of tools.{ns}."""\n', True, [])
    return files
