"""Tools handed to a session by the program that owns it: ``Session(tools=[fn, Tool(...)])`` and ``add_tools``.

The policy they get: the program that starts a session chose these tools, so each is **allowed** unless the
program or the operator says otherwise --

1. ``[policy.tools.<name>]`` in the config (``decision = "deny"`` or ``"approve"``, rules, budgets) decides first,
   as it does for every tool;
2. else the tool's own ``Tool(..., decision="deny" | "ask")`` (or ``tool_from_function(fn, decision=...)``);
3. else "allow".

Tools from configured modules and sources follow ``[policy] default`` instead (the operator's file lists them,
the program did not choose them).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from typing_extensions import override

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.registry import Tool, tool_from_function, tools_from_module
from cellgate.gate.calls.sources import ToolSource
from cellgate.gate.config import Settings

SOURCE = "program"  # Tool.source of a callable the owning program handed over
# What Session(tools=...) and add_tools take: a tool module's path, a module, a function or a Tool.
ToolSpec = str | os.PathLike[str] | ModuleType | Callable[..., Any] | Tool


def program_tools(items: Iterable[Any], where: str) -> list[Tool]:
    """The tools of functions, modules and ``Tool`` objects, each allowed unless it states a decision."""
    tools: list[Tool] = []
    for index, item in enumerate(items):
        if isinstance(item, Tool):
            found = [item if item.source else dataclasses.replace(item, source=SOURCE)]
        elif isinstance(item, ModuleType):
            found = tools_from_module(item, source=item.__name__)
        elif callable(item) and not inspect.isclass(item):
            found = [tool_from_function(item, source=SOURCE)]
        else:
            raise ConfigError(f"{where}: item {index} is {item!r} ({type(item).__name__}); pass a function, a "
                              "Tool, a module or the path of a tool module")
        tools += [tool if tool.default_decision else dataclasses.replace(tool, default_decision="allow")
                  for tool in found]
    return tools


def split(items: Iterable[Any], where: str) -> tuple[list[str], list[Tool]]:
    """``Session(tools=...)`` taken apart: paths of tool modules (loaded by the provisioner, as ``--tools`` are)
    and the program's own tools."""
    paths: list[str] = []
    others: list[Any] = []
    for item in items:
        if isinstance(item, (str, os.PathLike)):
            paths.append(str(Path(item)))
        else:
            others.append(item)
    return paths, program_tools(others, where)


class ProgramTools(ToolSource):
    """The owning program's tools as a source the provisioner opens with the session's others."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        super().__init__(Settings())
        self.tools = list(tools)

    @override
    def open(self) -> list[Tool]:
        return list(self.tools)

    @override
    def close(self) -> None:
        pass
