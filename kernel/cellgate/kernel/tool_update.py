"""Tools added to a running session (``Session.add_tools``): the generated ``tools`` package replaced in place.

The host sends the package's new sources as a cell calling ``install``. A finder serves them by module name, and
each loaded ``tools`` module is re-executed in its own namespace (package before its submodules), so every
reference to ``tools`` (the user's, the restricted runner's) sees the new functions; new submodules (an MCP
server's namespace) are imported from the same sources. A restarted kernel gets the new files from the host.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from . import ptc

PACKAGE = "tools"


class _Sources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the ``tools`` modules from the sources the host sent."""

    def __init__(self, files: dict[str, str]) -> None:
        self.modules: dict[str, tuple[str, bool]] = {}
        for path, source in files.items():
            parts = path.removesuffix(".py").split("/")
            package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if package else parts)
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                self.modules[name] = (source, package)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        found = self.modules.get(fullname)
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=f"<cellgate tools: {fullname}>",
                                               is_package=found[1])

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        source, _ = self.modules[module.__name__]
        exec(compile(source, f"<cellgate tools: {module.__name__}>", "exec"), module.__dict__)  # noqa: S102


def install(files: dict[str, str]) -> list[str]:
    """Replace the ``tools`` package by ``files`` ({relative path: source}); the names of the tools it has."""
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise TypeError("install takes the tools package as {relative path: source}")
    sources = _Sources(files)
    for finder in [f for f in sys.meta_path if isinstance(f, _Sources)]:  # an earlier addition's
        sys.meta_path.remove(finder)
    sys.meta_path.insert(0, sources)
    loaded = sorted((name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")),
                    key=lambda name: name.count("."))
    for name in loaded:
        if name in sources.modules:
            importlib.reload(sys.modules[name])
    tools = importlib.import_module(PACKAGE)
    _share_with_the_shell(tools)
    return list(getattr(tools, "__all__", ()))


def _share_with_the_shell(tools: ModuleType) -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - the kernel always has IPython
        return
    shell = get_ipython()
    if shell is None:
        return
    shell.user_ns["tools"] = shell.user_ns_hidden["tools"] = tools
    functions = ptc.namespace(tools)
    shell.user_ns.update(functions)
    shell.user_ns_hidden.update(functions)
