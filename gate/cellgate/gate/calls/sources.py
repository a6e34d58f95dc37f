"""Tool sources beyond Python modules, loaded through the ``cellgate.tool_sources`` entry points.

A source is configured by a section of ``cellgate.toml`` named like its entry
point (``[mcp]`` -> the ``mcp`` source in ``cellgate.extensions``), so the gate
knows the configuration's shape but not the implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Any

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.registry import Tool
from cellgate.gate.config import Settings

Report = Callable[..., None]  # report(event, **data): journalled by the session's recorder


class ToolSource(ABC):
    """One source of tools for one session.

    The provisioner calls ``open`` once when the session starts (before the
    first kernel launch) and ``close`` once when the session ends (not on
    kernel restarts); neither calls super().
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.report: Report = lambda event, **data: None  # set by the provisioner once its recorder exists
        self.notes: list[dict[str, Any]] = []  # said during open(), journalled once the recorder exists

    @abstractmethod
    def open(self) -> list[Tool]:
        """Connect and return the tools; raise ConfigError naming what failed and how to fix it."""

    @abstractmethod
    def close(self) -> None:
        """Disconnect; must not raise."""


def configured_sources(settings: Settings) -> list[ToolSource]:
    """Instantiate the sources whose configuration section is non-empty."""
    wanted = {"mcp": bool(settings.mcp.servers)}
    found = {entry.name: entry for entry in entry_points(group="cellgate.tool_sources")}
    sources = []
    for name, needed in wanted.items():
        if not needed:
            continue
        if name not in found:
            raise ConfigError(f"[{name}] is configured but no {name!r} tool source is installed "
                              "(entry point group cellgate.tool_sources); reinstall cellgate")
        factory: Any = found[name].load()
        sources.append(factory(settings))
    return sources


def open_sources(settings: Settings, registry: Any) -> list[ToolSource]:
    """Open every configured source and add its tools to ``registry``; on failure close them all."""
    return open_all(configured_sources(settings), registry)


def open_all(sources: Iterable[ToolSource], registry: Any) -> list[ToolSource]:
    """Open ``sources`` in order and add their tools to ``registry``; on failure close the ones opened."""
    opened: list[ToolSource] = []
    try:
        for source in sources:
            opened.append(source)
            for tool in source.open():
                registry.add(tool)
    except BaseException:
        close_sources(opened)
        raise
    return opened


def close_sources(sources: list[ToolSource]) -> None:
    for source in reversed(sources):
        source.close()
