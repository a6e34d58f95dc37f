"""``cellgate.toml``: tools, sandbox limits and where audit notebooks go.

Found through ``--config``, then ``CELLGATE_CONFIG``, then ``cellgate.toml``
in the working directory. Parsed into frozen pydantic models; unknown keys
are rejected with their location and what to do.

Extensions add their own sections (``[agent]``, ``[mcp]``, ...) through the
``cellgate.config_sections`` entry points (section name -> pydantic model):
``load_settings`` validates them with the rest of the file, and an extension
reads its section typed with ``settings.section(name, Model)``.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, create_model, field_validator

from cellgate.gate._entry_points import entry_points
from cellgate.gate._errors import ConfigError
from cellgate.gate._model import StrictModel, validation_problems
from cellgate.gate.calls.policy import Policy
from cellgate.gate.network.rules import NetworkSettings
from cellgate.gate.sandbox.settings import SandboxSettings as SandboxSettings  # beside the seam; found here too

CONFIG_NAME = "cellgate.toml"
SECTIONS_GROUP = "cellgate.config_sections"

M = TypeVar("M", bound=BaseModel)


class ToolsConfig(StrictModel):
    modules: list[str] = Field(default_factory=list, description="Python files whose public functions are tools")
    call_style: Literal["module", "ptc"] = Field(
        default="module", description='"ptc": each tool is also a top-level `async def name(args: dict) -> str` in '
        "the kernel's namespace (Anthropic's programmatic tool calling style; tools.ptc holds them either way)")


class FrontendSettings(StrictModel):
    """``[frontend]``: what of a kernel's output a frontend (JupyterLab, nbclient, ...) may receive.

    Outputs are sanitized by default (``cellgate.gate.audit.sanitize``): no script reaches a frontend.
    """

    trusted_mime: list[str] = Field(default_factory=list, description=(
        "MIME types passed to frontends exactly as the kernel sent them; whatever such a renderer can do, "
        "the sandbox's code can do in the user's browser"))
    allow_comms: bool = Field(default=False, description=(
        "pass comms the kernel opens (ipywidgets and other custom comms) to frontends; widget views run "
        "their models' code in the page, so the sandbox's code can then act in the user's browser"))

    @field_validator("trusted_mime")
    @classmethod
    def _mime(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(r"^[a-zA-Z0-9]+/[a-zA-Z0-9.+-]+$", name):
                raise ValueError(f"{name!r} is not a MIME type (like application/vnd.plotly.v1+json)")
        return names


class AuditConfig(StrictModel):
    dir: str = "cellgate-runs"


class PackagesSettings(StrictModel):
    """``[packages]``: what ``%pip install`` in a cell may bring in (``calls.packages``); empty: nothing."""

    allow: list[str] = Field(default_factory=list, description="requirements naming each distribution a session may "
                             "install, dependencies included, with the versions allowed: [\"humanize>=4,<5\"]")
    max_mb: int = Field(default=256, ge=1, le=16384, description="the most one install may download (its wheels), "
                        "and the most one file of a wheel may unpack to")
    max_unpacked_mb: int | None = Field(default=None, ge=1, le=65536, description="the most a session's package "
                                        "layer may hold, unpacked (each install's wheels are checked against it "
                                        "before anything is written); default 4 x max_mb")

    @property
    def unpacked_limit_mb(self) -> int:
        """``max_unpacked_mb``, or its default: four times ``max_mb``."""
        return self.max_unpacked_mb if self.max_unpacked_mb is not None else 4 * self.max_mb

    @field_validator("allow")
    @classmethod
    def _allow(cls, entries: list[str]) -> list[str]:
        from cellgate.gate.calls.packages import parse_allow

        parse_allow(entries)
        return entries


class Settings(StrictModel):
    """The core's sections. ``load_settings`` returns an instance of ``settings_type()``, this class with the
    installed extensions' sections added; read those with ``section``."""

    tools: ToolsConfig = ToolsConfig()
    sandbox: SandboxSettings = SandboxSettings()
    audit: AuditConfig = AuditConfig()
    frontend: FrontendSettings = FrontendSettings()
    policy: Policy = Policy()
    packages: PackagesSettings = PackagesSettings()
    network: NetworkSettings = NetworkSettings()
    # Where relative paths in the file are resolved from.
    base_dir: str = Field(default_factory=os.getcwd, exclude=True)
    # The file these settings were read from; None when none was found (then base_dir is where it was looked for).
    source: str | None = Field(default=None, exclude=True)

    def section(self, name: str, model: type[M]) -> M:
        """An extension's section (``[name]``), validated by ``model``; its defaults when the file has none."""
        value = getattr(self, name) if name in type(self).model_fields else model()
        if not isinstance(value, model):
            raise TypeError(f"[{name}] of cellgate.toml is a {type(value).__qualname__}, not a {model.__qualname__}; "
                            f"check the {SECTIONS_GROUP} entry point named {name!r}")
        return value

    def configured_sections(self) -> list[str]:
        """The extension sections whose values differ from their defaults, by name."""
        extra = sorted(set(type(self).model_fields) - set(Settings.model_fields))
        return [name for name in extra if getattr(self, name) != type(getattr(self, name))()]

    def resolve(self, path: str) -> Path:
        return (Path(self.base_dir) / os.path.expanduser(path)).resolve()

    def tool_paths(self) -> list[Path]:
        return [self.resolve(p) for p in self.tools.modules]


@functools.cache
def settings_type() -> type[Settings]:
    """``Settings`` with a field for each section registered by an extension (see the module docstring)."""
    sections: dict[str, Any] = {}
    for entry in sorted(entry_points(group=SECTIONS_GROUP), key=lambda e: e.name):
        model = entry.load()
        if entry.name in Settings.model_fields or not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(f"entry point {entry.name} = {entry.value!r} (group {SECTIONS_GROUP}) must name a "
                              "pydantic model of a section cellgate does not define itself; fix or uninstall the "
                              "package that provides it")
        sections[entry.name] = (model, Field(default_factory=model))
    if not sections:
        return Settings
    return create_model("Settings", __base__=Settings, __module__=__name__, **sections)


def _not_a_config(path: Path) -> str | None:
    """Why ``path`` cannot be a config file (it is missing, or not a regular file), or None."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    kind = "a folder" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
        "a pipe" if stat.S_ISFIFO(mode) else "a special file"
    return f"is {kind}, not a cellgate.toml file (an empty file gives every default)"


def find_config(explicit: str | None = None, cwd: str | None = None) -> Path | None:
    if explicit:
        path = Path(explicit)
        problem = _not_a_config(path)
        if problem:
            raise ConfigError(f"config file {explicit!r} {problem}; check the --config path")
        return path.resolve()
    env = os.environ.get("CELLGATE_CONFIG")
    if env:
        path = Path(env)
        problem = _not_a_config(path)
        if problem:
            raise ConfigError(f"CELLGATE_CONFIG={env!r} {problem}; fix or unset it")
        return path.resolve()
    local = Path(cwd or os.getcwd()) / CONFIG_NAME
    return local.resolve() if local.is_file() else None


def load_settings(path: Path | None, cwd: str | None = None) -> Settings:
    if path is None:
        return settings_type()(base_dir=cwd or os.getcwd())
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    for key in ("base_dir", "source"):  # set from where the file is, never by it
        if key in data:
            raise ConfigError(f"{path}: unknown key {key!r}; remove it")
    model = settings_type()
    try:
        return model(**data, base_dir=str(path.parent), source=str(path))
    except ValidationError as exc:
        text = path.read_text()

        def where(loc: Sequence[Any]) -> str:
            line = locate(text, list(loc))
            return f"{path}:{line}" if line else str(path)

        raise ConfigError("\n".join(validation_problems(exc, where, model))) from None


def locate(text: str, loc: list[Any]) -> int | None:
    """The line (1-based) where a key path most likely appears in a TOML file."""
    lines = text.splitlines()
    position, found, end = 0, None, len(lines)
    for part in loc:
        if isinstance(part, int):  # the part-th table of an array of tables ([[network.allow]]), else skipped
            position, found, end = _nth_table(lines, found, part) or (position, found, end)
            continue
        key = re.escape(str(part))
        pattern = re.compile(rf'(^\s*"?{key}"?\s*=)|(^\s*\[\[?[^\]]*\b{key}\b[^\]]*\]\]?)|([{{,]\s*{key}\s*=)')
        for index in range(position, end):
            if pattern.search(lines[index]):
                position, found = index, index + 1
                break
    return found


def _nth_table(lines: list[str], found: int | None, n: int) -> tuple[int, int, int] | None:
    """(index, line, end of its keys) of the n-th ``[[header]]`` like the one on line ``found``, or None."""
    header = re.compile(r"^\s*(\[\[[^\]]*\]\])")
    first = header.match(lines[found - 1]) if found else None
    if found is None or first is None:
        return None
    name = first.group(1).replace(" ", "")
    hits = [i for i in range(found - 1, len(lines)) if (m := header.match(lines[i])) and m.group(1).replace(" ", "")
            == name]
    if n >= len(hits):
        return None
    start = hits[n]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    return start, start + 1, end
