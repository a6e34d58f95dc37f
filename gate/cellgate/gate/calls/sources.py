"""Tool sources beyond Python modules, loaded through the ``cellgate.tool_sources`` entry points.

A source is configured by the section of ``cellgate.toml`` named like its
entry point; the extension that provides the source registers that section's
model (entry points ``cellgate.config_sections``, see ``cellgate.gate.config``).
A source is opened when its section differs from the section's defaults, so
the gate knows neither the implementation nor the shape of its configuration.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from cellgate.gate._entry_points import entry_points
from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.registry import Tool

Report = Callable[..., None]  # report(event, **data): journalled by the session's recorder
M = TypeVar("M", bound=BaseModel)


class SourceSettings(Protocol):
    """What a source reads of the session's settings (``cellgate.gate.config.Settings`` is one; ``config`` sits
    above the calls room, which never imports it)."""

    def configured_sections(self) -> list[str]: ...

    def section(self, name: str, model: type[M]) -> M: ...

    def resolve(self, path: str) -> Path: ...


class ToolSource(ABC):
    """One source of tools for one session.

    The provisioner calls ``open`` once when the session starts (before the
    first kernel launch) and ``close`` once when the session ends (not on
    kernel restarts); neither calls super().
    """

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self.report: Report = lambda event, **data: None  # set by the provisioner once its recorder exists
        self.notes: list[dict[str, Any]] = []  # said during open(), journalled once the recorder exists

    @abstractmethod
    def open(self) -> list[Tool]:
        """Connect and return the tools; raise ConfigError naming what failed and how to fix it."""

    @abstractmethod
    def close(self) -> None:
        """Disconnect; must not raise."""

    @classmethod
    def describe(cls, settings: SourceSettings) -> list[str]:
        """What the source will connect to, one line each, for the notebook's metadata; never credentials.

        Called by the provisioner before the session is recorded; the default says nothing.
        """
        return []


def configured_source_types(settings: SourceSettings) -> list[type[ToolSource]]:
    """The installed sources (entry points ``cellgate.tool_sources``) whose section of the file is configured."""
    configured = set(settings.configured_sections())
    found = sorted(entry_points(group="cellgate.tool_sources"), key=lambda entry: entry.name)
    types = []
    for entry in (entry for entry in found if entry.name in configured):
        factory: Any = entry.load()
        if not (isinstance(factory, type) and issubclass(factory, ToolSource)):
            raise ConfigError(f"entry point {entry.name} = {entry.value!r} (group cellgate.tool_sources) is not a "
                              "ToolSource; fix or uninstall the package that provides it")
        types.append(factory)
    return types


def configured_sources(settings: SourceSettings) -> list[ToolSource]:
    """Instantiate the sources whose configuration section is configured."""
    return [factory(settings) for factory in configured_source_types(settings)]


def describe_sources(settings: SourceSettings) -> list[str]:
    """What the configured sources will connect to (``ToolSource.describe``), for the notebook's metadata."""
    return [line for factory in configured_source_types(settings) for line in factory.describe(settings)]


def open_sources(settings: SourceSettings, registry: Any) -> list[ToolSource]:
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
