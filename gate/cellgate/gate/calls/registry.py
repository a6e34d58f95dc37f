"""Tool definitions and tool sources.

A ``Tool`` is a host-side callable with a name, a description and the JSON
Schema of its arguments. The built-in source turns a Python module's public
functions into tools, deriving each schema from the type hints with pydantic
and the parameter descriptions from the docstring with docstring_parser.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import sys
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, cast

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import digest
from cellgate.gate.calls import effects
from cellgate.gate.calls.effects import Effect
from cellgate.gate.calls.stubgen import RESERVED, check_identifier

PREVIEW_ATTRIBUTE = "__cellgate_preview__"
F = typing.TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any] = field(repr=False, compare=False)
    source: str = ""
    # The decision when the policy names neither the tool nor a rule for it:
    # "allow" for tools the operator passed explicitly (--tools), or what the
    # tool's source says (an MCP annotation); None falls to [policy] default.
    default_decision: Literal["allow", "deny", "approve"] | None = None
    # A keyword-only `idempotency_key` parameter is filled by the gate, not by the caller.
    accepts_idempotency_key: bool = False
    # JSON Schema of the result, when the source declares one (an MCP outputSchema): typed in the stubs.
    returns: dict[str, Any] | None = None
    # The decision the program that hands the tool to a session states for it (``Session(tools=[...])``,
    # ``add_tools``): "ask" is the policy's "approve". When set, it is the default decision (the policy's
    # [policy.tools.<name>] still overrides it, as it does every tool's default).
    decision: Literal["allow", "deny", "ask"] | None = None
    # What the tool does to the world (``calls.effects``): None is the default, "write"; ``effect_from`` says who
    # said it ("the tool's code", "the server's hint", "policy").
    effect: Effect | None = None
    effect_from: str = ""
    # What a plan's cell gets instead of a write's result (``calls.plans``): called with the call's arguments,
    # it returns what the write would (e.g. the record it would make, with a made-up id). None: a placeholder.
    preview: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    # What decided ``default_decision`` when it is not the tool's source: a request's network rule
    # ("network.allow[0]", or why none matched), recorded as the call's rule.
    decided_by: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.effect is not None:
            effects.checked(self.effect, f"tool {self.name!r}")
        if self.decision is None:
            return
        if self.decision not in ("allow", "deny", "ask"):
            raise ConfigError(f"tool {self.name!r}: decision {self.decision!r} is not one of 'allow', 'deny', "
                              "'ask'; pass one of them, or None to follow [policy]")
        object.__setattr__(self, "default_decision", "approve" if self.decision == "ask" else self.decision)

    @classmethod
    def from_function(cls, function: Callable[..., Any], name: str | None = None, source: str = "",
                      decision: Literal["allow", "deny", "ask"] | None = None, effect: Effect | None = None) -> Tool:
        """A tool described from a function's signature and docstring (``tool_from_function``), e.g.
        ``Tool.from_function(refund, decision="ask", effect="write")``."""
        return tool_from_function(function, name, source, decision, effect)

    with_effect = staticmethod(effects.marking)  # ``@Tool.with_effect("read")`` on a tool function

    @staticmethod
    def with_preview(preview: Callable[..., Any]) -> Callable[[F], F]:
        """``@Tool.with_preview(lambda title: {"id": "(planned)", "title": title})`` on a tool function: what a
        plan's cell gets for the write (``Session.plan``)."""
        def mark(function: F) -> F:
            setattr(function, PREVIEW_ATTRIBUTE, preview)
            return function

        return mark

    def effective_effect(self, policy_effect: str | None = None) -> tuple[Effect, str]:
        """The effect a call of this tool has, and who said it (``[policy.tools.NAME] effect`` first)."""
        return effects.resolve(policy_effect, self.effect, self.effect_from or "the tool's code")

    def manifest_entry(self) -> dict[str, Any]:
        # JSON object order is not kept by every writer (notebooks sort keys), so the
        # parameter order of the signature is stated explicitly.
        order = list((self.parameters.get("properties") or {}).keys())
        entry = {"name": self.name, "description": self.description, "parameters": self.parameters, "order": order}
        if self.returns is not None:
            entry["returns"] = self.returns
        entry["effect"] = self.effect or effects.DEFAULT
        return entry


def _strip_titles(schema: Any) -> Any:
    """pydantic adds a 'title' to every property; the stubs and the model don't need it."""
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


def tool_from_function(function: Callable[..., Any], name: str | None = None, source: str = "",
                       decision: Literal["allow", "deny", "ask"] | None = None,
                       effect: Effect | None = None) -> Tool:
    """A tool described from a function's signature and docstring (``decision``: see ``Tool.decision``;
    ``effect``: else what the function's ``@cellgate.effect`` says, see ``calls.effects``)."""
    name = name or getattr(function, "__name__", None)
    if not isinstance(name, str):
        raise ConfigError(f"tool {function!r} has no __name__ to call it by; pass name=... (tool_from_function) "
                          "or a Tool")
    check_identifier(name, "tool name")
    import docstring_parser
    from pydantic import TypeAdapter

    doc = docstring_parser.parse(inspect.getdoc(function) or "")
    signature = inspect.signature(function)
    key = signature.parameters.get("idempotency_key")
    takes_key = key is not None and key.kind is inspect.Parameter.KEYWORD_ONLY
    described_function = function
    if takes_key:
        # Derive the schema from the signature without the gate-supplied parameter.
        @functools.wraps(function)
        def described_function(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never called
            return function(*args, **kwargs)

        described_function.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p for n, p in signature.parameters.items() if n != "idempotency_key"])
    try:
        schema = TypeAdapter(cast(Any, described_function)).json_schema()
    except Exception as exc:
        raise ConfigError(
            f"tool {name!r} ({source or function.__module__}): cannot derive a JSON Schema "
            f"from its signature: {exc}; give every parameter a JSON-compatible type hint"
        ) from None
    schema = _strip_titles(schema)
    properties = schema.get("properties", {})
    for arg, parameter in signature.parameters.items():
        given = parameter.default is not inspect.Parameter.empty
        if given and arg in properties and not _json_default(properties[arg]):
            # The gate fills defaults before the policy sees a call; one it cannot write down would reach the tool unseen.
            raise ConfigError(
                f"tool {name!r} ({source or function.__module__}): the default of parameter {arg!r} "
                f"({parameter.default!r}) cannot be written in its JSON Schema, so policy rules could not see it; "
                "use a JSON value (a number, string, bool, None, list or dict) as the default")
    described = {p.arg_name: p.description for p in doc.params if p.description}
    for arg, prop in schema.get("properties", {}).items():
        if arg in described:
            prop["description"] = described[arg]
    summary = "\n\n".join(part for part in (doc.short_description, doc.long_description) if part)
    said = effect if effect is not None else effects.declared(function, f"tool {name!r} ({source or '?'})")
    preview = getattr(function, PREVIEW_ATTRIBUTE, None)
    return Tool(name=name, description=summary, parameters=schema, function=function, source=source,
                accepts_idempotency_key=takes_key, returns=_result_schema(function), decision=decision,
                effect=said, effect_from="the tool's code" if said is not None else "",
                preview=preview if callable(preview) else None)


def _result_schema(function: Callable[..., Any]) -> dict[str, Any] | None:
    """The JSON Schema of a function's return annotation, for the stubs' return type (``help(tools.x)``); None
    when it has none or none can be derived (the stub then says ``Any``)."""
    from pydantic import TypeAdapter

    try:
        hints = typing.get_type_hints(function)
    except Exception:  # an annotation that does not resolve: the stub says Any, as before
        return None
    if "return" not in hints or hints["return"] is typing.Any:
        return None
    try:
        schema = TypeAdapter(hints["return"]).json_schema()
    except Exception:  # e.g. a DataFrame: not JSON, and the gate refuses such a result anyway
        return None
    schema = _strip_titles(schema)
    return schema if isinstance(schema, dict) and "$defs" not in schema and "$ref" not in schema else None


def _json_default(prop: dict[str, Any]) -> bool:
    """Whether the schema holds the parameter's default as JSON can write it (pydantic leaves out what it cannot
    serialize, and keeps NaN and the infinities, which JSON has no words for)."""
    if "default" not in prop:
        return False
    try:
        json.dumps(prop["default"], allow_nan=False)
    except ValueError:
        return False
    return True


def _filling_properties(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
    if isinstance(instance, dict) and isinstance(properties, dict):
        for name, subschema in properties.items():
            if isinstance(subschema, dict) and "default" in subschema and name not in instance:
                instance[name] = copy.deepcopy(subschema["default"])
    import jsonschema

    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, schema)


@functools.cache
def _filler_class() -> Any:
    # jsonschema's documented way to fill defaults: a validator whose `properties` keyword sets them as it descends.
    # Imported at first use: jsonschema takes ~2 s to import where rfc3987_syntax is installed.
    import jsonschema

    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        jsonschema.Draft202012Validator, {"properties": _filling_properties})


def DefaultsFiller(schema: dict[str, Any]) -> Any:  # noqa: N802 - used like the validator class it makes
    """A jsonschema validator of ``schema`` that fills in defaults as it descends (see ``with_defaults``)."""
    return _filler_class()(schema)


def with_defaults(filler: Any, args: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``args`` with every schema default filled in (also in nested objects): what the tool will receive.

    The gate validates, decides and records this object, and passes exactly it to the tool.
    """
    filled = copy.deepcopy(args)
    for _ in filler.iter_errors(filled):  # validation errors are the strict validator's job, afterwards
        pass
    return filled


def load_module(path: str | Path) -> ModuleType:
    """Import a tool module from a file path, under a private module name."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ConfigError(f"tool module {str(path)!r} does not exist; check the path in --tools or [tools] modules")
    module_name = "cellgate_tools_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"tool module {str(path)!r} cannot be imported; it must be a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ConfigError(f"tool module {str(path)!r} failed to import: {type(exc).__name__}: {exc}") from exc
    return module


def tools_from_module(module: ModuleType, source: str = "") -> list[Tool]:
    """The module's public functions defined in it (or listed in ``__all__``)."""
    names: Iterable[str] = getattr(module, "__all__", None) or [
        n for n, v in vars(module).items()
        if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == module.__name__
    ]
    return [tool_from_function(getattr(module, n), source=source or module.__name__) for n in names]


class ToolRegistry:
    """The tools of one session, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in RESERVED:
            raise ConfigError(f"tool {tool.name!r} ({tool.source}) uses a reserved name; rename it")
        if tool.name in self._tools:
            other = self._tools[tool.name].source
            raise ConfigError(f"tool {tool.name!r} is defined twice ({other} and {tool.source}); rename one")
        self._tools[tool.name] = tool

    @classmethod
    def from_paths(cls, paths: Iterable[str | Path], granted: Iterable[str | Path] = ()) -> ToolRegistry:
        """Tools from modules; those in ``granted`` modules default to allow."""
        registry = cls()
        configured = [Path(p).resolve() for p in paths]
        extra = [Path(p).resolve() for p in granted if Path(p).resolve() not in configured]
        modules: list[tuple[Path, Literal["allow"] | None]] = [*((p, None) for p in configured),
                                                               *((p, "allow") for p in extra)]
        for path, default in modules:
            for tool in tools_from_module(load_module(path), source=str(path)):
                registry.add(dataclasses.replace(tool, default_decision=default))
        return registry

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def with_policy_effects(self, said: Callable[[str], str | None]) -> None:
        """Give each tool the effect the policy says for it (``said(name)``; None: the tool's own stands), so the
        manifest, the stubs and the record all show the effect calls will have."""
        for name, tool in self._tools.items():
            policy_effect = said(name)
            if policy_effect is not None:
                self._tools[name] = dataclasses.replace(tool, effect=effects.checked(
                    policy_effect, f"[policy.tools.{name}] effect"), effect_from="policy")

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def manifest(self) -> list[dict[str, Any]]:
        return [self._tools[n].manifest_entry() for n in self.names()]

    def manifest_sha256(self) -> str:
        return digest(self.manifest())
