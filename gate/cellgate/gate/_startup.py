"""What the command line does before a command runs, so that it starts fast.

jsonschema imports every format checker's library when it is imported (nbformat imports jsonschema, so every
command that reads a notebook does too). One of them, ``rfc3987_syntax`` (the "iri" format, installed with
JupyterLab's ``jsonschema[format-nongpl]``), compiles a Lark grammar at import: 1.1-3 s measured here, more than
everything else ``cellgate show`` does. Such a module is stood in for until its function is first called; what
the function returns is the same.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

# module -> the functions jsonschema takes from it (``from rfc3987_syntax import is_valid_syntax``); the two
# validators compile large regular expressions at import (~20 ms together). isoduration (arrow, ~50 ms) cannot
# wait: jsonschema reads its exception class at import.
SLOW_FORMAT_MODULES = {"rfc3987_syntax": ("is_valid_syntax",), "rfc3986_validator": ("validate_rfc3986",),
                       "rfc3339_validator": ("validate_rfc3339",)}


def defer_slow_imports() -> None:
    for name, functions in SLOW_FORMAT_MODULES.items():
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            sys.modules[name] = _stand_in(name, functions)


def _stand_in(name: str, functions: tuple[str, ...]) -> types.ModuleType:
    """A module named ``name`` whose ``functions`` (and any other attribute) import the real one at first use."""
    stand_in = types.ModuleType(name, f"stands in for {name} until first used (cellgate.gate._startup)")

    def real() -> types.ModuleType:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        return importlib.import_module(name)

    def forward(function: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(real(), function)(*args, **kwargs)
        call.__name__ = call.__qualname__ = function
        return call

    def attribute(attribute: str) -> Any:  # PEP 562; the import system's own questions (__path__) are not a use
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(real(), attribute)

    for function in functions:
        setattr(stand_in, function, forward(function))
    vars(stand_in)["__getattr__"] = attribute
    return stand_in
