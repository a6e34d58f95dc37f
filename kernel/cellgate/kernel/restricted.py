"""Restricted mode: cells compiled and run under RestrictedPython's guards, inside gVisor.

Defense in depth, not the boundary: gVisor is the boundary. With
``[sandbox] restricted = true`` the host compiles every program with
RestrictedPython's policy first (``check``: compile only, never executed on the
host) and rejects a violation before it reaches the kernel; the kernel then
compiles it again and runs it with these guards:

- attribute access through ``safer_getattr`` (no ``_`` names, no frame,
  traceback, code or generator internals, no ``str.format`` traversal), and no
  module reachable as an attribute unless its import is allowed;
- imports limited to the configured allowlist (``tools`` always);
- no ``exec``/``eval``/``compile``/``open``/``globals``/``type`` builtins;
  attribute writes only on objects that allow them (``full_write_guard``).

What it costs: the value of the last expression is not displayed (print it);
classes cannot set attributes on their instances; ``_``-names, ``open``,
``getattr`` on dunders, ``str.format`` and modules outside the allowlist are refused.
RestrictedPython is imported only in restricted mode.
"""

from __future__ import annotations

import operator
import sys
import types
from collections.abc import Callable
from typing import Any

# Always importable in restricted mode; the operator's [sandbox] allowed_imports adds to it.
# Not operator (attrgetter reads any attribute), functools, typing (get_type_hints evaluates
# strings), dataclasses (generates and execs source): each would step around the guards.
DEFAULT_IMPORTS = frozenset({
    "math", "statistics", "json", "re", "datetime", "collections", "itertools", "decimal", "fractions",
    "heapq", "bisect", "textwrap", "time", "uuid", "hashlib", "base64", "csv", "copy", "pprint",
})
FILENAME = "<cell>"


def check(source: str) -> list[str]:
    """RestrictedPython's compile-time verdict on a program: the violations, or [] (compile only)."""
    from RestrictedPython.compile import compile_restricted_exec

    return list(compile_restricted_exec(source, filename=FILENAME).errors)


def allowed(module: str, imports: frozenset[str]) -> bool:
    top = module.partition(".")[0]
    if any(part.startswith("_") for part in module.split(".")):
        return False
    return top == "tools" or top in imports


class _Printer:
    """RestrictedPython turns ``print(...)`` into ``_print_(_getattr_)._call_print(...)``: print straight out."""

    def __init__(self, _getattr_: Any = None) -> None:
        pass

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        kwargs.pop("file", None)  # printing to a file object would reach it unguarded
        print(*objects, **kwargs, file=sys.stdout)

    def __call__(self) -> str:
        return ""


class RestrictedRunner:
    """One persistent namespace; ``run`` executes a program in it under the guards."""

    def __init__(self, imports: frozenset[str], preload: dict[str, Any]) -> None:
        from RestrictedPython.Eval import default_guarded_getitem, default_guarded_getiter
        from RestrictedPython.Guards import (
            full_write_guard,
            guarded_iter_unpack_sequence,
            guarded_unpack_sequence,
            safe_builtins,
            safer_getattr,
        )
        from RestrictedPython.Limits import limited_builtins

        self.imports = DEFAULT_IMPORTS | imports

        def guarded_getattr(obj: Any, name: str, *default: Any) -> Any:
            value = safer_getattr(obj, name, *(default or (_RAISE,)))  # type: ignore[no-untyped-call]
            if value is _RAISE:
                raise AttributeError(name)
            if isinstance(value, types.ModuleType) and not allowed(value.__name__, self.imports):
                raise AttributeError(f"module {value.__name__!r} is not reachable in restricted mode")
            if isinstance(value, (types.FrameType, types.TracebackType, types.CodeType)):
                raise AttributeError(f"{type(value).__name__} objects are not reachable in restricted mode")
            return value

        def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),
                           level: int = 0) -> Any:
            if level != 0 or not allowed(name, self.imports):
                raise ImportError(f"import of {name!r} is not allowed in restricted mode; the allowed modules are "
                                  f"{', '.join(sorted(self.imports))} ([sandbox] allowed_imports)")
            for item in fromlist or ():
                if str(item).startswith("_"):
                    raise ImportError(f"'from {name} import {item}' is not allowed in restricted mode")
            module = __import__(name, globals, locals, fromlist, level)
            for item in fromlist or ():
                guarded_getattr(module, item, None)  # no module outside the allowlist through `from x import y`
            return module

        def inplace(op: str, x: Any, y: Any) -> Any:
            return INPLACE[op](x, y)

        builtins = dict(safe_builtins)
        builtins.update(limited_builtins)
        builtins.update({name: _builtin(name) for name in SAFE_EXTRA})
        builtins.update(__import__=guarded_import, getattr=guarded_getattr,
                        hasattr=lambda obj, name: _has(guarded_getattr, obj, name))
        for name in ("setattr", "delattr"):  # R10: no attribute writes through builtins
            builtins.pop(name, None)
        self.namespace: dict[str, Any] = {
            "__builtins__": builtins, "__name__": "__main__", "__metaclass__": type,
            "_getattr_": guarded_getattr, "_getitem_": default_guarded_getitem, "_getiter_": default_guarded_getiter,
            "_iter_unpack_sequence_": guarded_iter_unpack_sequence, "_unpack_sequence_": guarded_unpack_sequence,
            "_write_": full_write_guard, "_inplacevar_": inplace, "_print_": _Printer,
            "_apply_": lambda f, *a, **kw: f(*a, **kw),
            **preload,
        }

    def run(self, source: str) -> None:
        from RestrictedPython.compile import compile_restricted_exec

        result = compile_restricted_exec(source, filename=FILENAME)
        if result.errors or result.code is None:
            raise SyntaxError("restricted mode refused this program: " + "; ".join(result.errors))
        exec(result.code, self.namespace)  # noqa: S102 - guarded bytecode, inside the sandbox


_RAISE = object()

SAFE_EXTRA = ("all", "any", "dict", "enumerate", "filter", "iter", "map", "max", "min", "next", "reversed",
              "sorted", "sum", "zip", "print", "format", "bytes", "bytearray", "object", "NotImplemented",
              "ascii", "bin", "frozenset", "set", "StopAsyncIteration")

INPLACE: dict[str, Callable[[Any, Any], Any]] = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
           "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "<<=": operator.ilshift,
           ">>=": operator.irshift, "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor,
           "@=": operator.imatmul}


def _builtin(name: str) -> Any:
    import builtins

    return getattr(builtins, name)


def _has(getter: Any, obj: Any, name: str) -> bool:
    try:
        getter(obj, name)
    except (AttributeError, NotImplementedError):
        return False
    return True
