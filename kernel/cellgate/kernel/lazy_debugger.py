"""debugpy, loaded when a frontend first debugs, not in every kernel.

ipykernel imports debugpy (with pydevd: ~90 modules, ~8 MB of memory) as its kernel starts whenever it is
installed, for the Debug Adapter Protocol on the control channel. Few sessions ever debug, and that memory is
every idle sandbox's (issue 33: host memory per idle session). ``hold_back()``, called as the kernel's module is
imported (before traitlets resolves ``IPythonKernel.debugger_class``, which imports ipykernel's debugger module as
a kernel is made), lets the kernel start with debugpy out of reach; ``CellgateKernel`` still reports the
"debugger" feature, so a frontend offers it as before, and makes ipykernel's own debugger from ``load()`` on the
first ``debug_request``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


def hold_back() -> None:
    """Import ipykernel's debugger module without debugpy (its ``_is_debugpy_available`` False), unless
    something imported it already."""
    if "ipykernel.debugger" not in sys.modules:
        saved = sys.modules.get("debugpy")
        sys.modules["debugpy"] = None  # type: ignore[assignment]  # import debugpy: ImportError
        try:
            import ipykernel.debugger  # noqa: F401
        finally:
            if saved is None:
                del sys.modules["debugpy"]
            else:
                sys.modules["debugpy"] = saved


def installed() -> bool:
    """Whether debugpy can be imported (the kernel then offers the debugger)."""
    try:
        return importlib.util.find_spec("debugpy") is not None
    except ValueError:  # in sys.modules without a spec
        return "debugpy" in sys.modules


def load() -> ModuleType | None:
    """ipykernel's debugger module with debugpy loaded; None if debugpy does not import."""
    import ipykernel.debugger as module

    if not module._is_debugpy_available:
        module = importlib.reload(module)  # ipykernel reads the flag from the module each time
    return module if module._is_debugpy_available else None
