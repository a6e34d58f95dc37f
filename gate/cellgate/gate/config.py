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
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, create_model, field_validator, model_validator

from cellgate.gate._errors import ConfigError
from cellgate.gate._model import StrictModel, validation_problems
from cellgate.gate.calls.policy import Policy

CONFIG_NAME = "cellgate.toml"
SECTIONS_GROUP = "cellgate.config_sections"
BACKENDS_GROUP = "cellgate.sandbox_backends"  # as ``cellgate.gate.sandbox.backend`` (not imported here: it is heavy)

M = TypeVar("M", bound=BaseModel)


class ToolsConfig(StrictModel):
    modules: list[str] = Field(default_factory=list, description="Python files whose public functions are tools")


class SandboxSettings(StrictModel):
    backend: str = Field(default="local", description="where kernels run: \"local\" (runsc on this host) or a "
                         "backend an extension installs (\"kubernetes\"), by its cellgate.sandbox_backends name")
    isolation: Literal["gvisor", "none"] = "gvisor"
    runsc: str | None = None
    platform: Literal["systrap", "ptrace", "kvm"] | None = None
    memory_mb: int = Field(default=1024, ge=128, le=65536)
    pids: int = Field(default=256, ge=128, le=65536)
    open_files: int = Field(default=1024, ge=64, le=1 << 20)
    tmp_mb: int = Field(default=256, ge=1, le=65536)
    workspace: str | None = None
    workspace_mb: int = Field(default=256, ge=1, le=1 << 20, description="size of /workspace: its private tmpfs, or the "
                              "most free space the filesystem of a host `workspace` folder may have")
    cell_timeout: float = Field(default=600.0, gt=0)
    interrupt_grace: float = Field(default=5.0, gt=0)
    call_timeout: float = Field(default=30.0, gt=0)
    start_timeout: float = Field(default=60.0, gt=0)
    require_hard_limits: bool = Field(default=False, description="refuse to start a sandbox whose memory and pids "
                                      "limits cannot bind it as a whole (without root: no cgroup)")
    cgroup_parent: str | None = Field(default=None, description="without root: the cgroup an admin delegated to this "
                                      "user (v1: under the user's own cgroup path in each of memory and pids; "
                                      "else $CELLGATE_CGROUP_PARENT); each sandbox gets a child there")
    file_limit_mb: int = Field(default=64, ge=1, le=4096, description="largest file Session.upload or download "
                               "moves in or out of the sandbox (each kept as a blob of the record)")
    output_limit_kb: int = Field(default=8192, ge=16, description="recorded output per cell; head and tail are kept")
    pool: int = Field(default=0, ge=0, le=64, description="sandboxes started ahead by servers that hand out sessions "
                                                  "(cellgate mcp serve); each is used by one session only")
    snapshot: bool = Field(default=True, description="gVisor: start each sandbox from a snapshot image of a started "
                                             "kernel, built once per configuration")
    max_message_mb: int = Field(default=64, ge=1, le=4096, description="largest message (each frame) the host reads from "
                                                              "the kernel on any channel; a larger one stops the cell")
    max_refusals_per_cell: int = Field(default=100, ge=1, le=1_000_000, description="refused tool calls a cell may make; "
                                                                          "past them the cell is stopped")
    restricted: bool = Field(default=False, description="also run cells under RestrictedPython (defense in depth)")
    allowed_imports: list[str] = Field(default_factory=list, description="restricted mode: modules beyond the default set")

    @model_validator(mode="after")
    def _message_under_memory(self) -> SandboxSettings:
        if self.max_message_mb * 2 > self.memory_mb:
            raise ValueError(f"max_message_mb = {self.max_message_mb} must be at most half of memory_mb = "
                             f"{self.memory_mb}: the host holds a message in memory while it checks it")
        return self

    @field_validator("backend")
    @classmethod
    def _backend(cls, name: str) -> str:
        if name == "local":  # the core's own; the others are looked up (slow: every installed distribution)
            return name
        installed = sorted({"local", *(entry.name for entry in entry_points(group=BACKENDS_GROUP))})
        if name not in installed:
            raise ValueError(f"{name!r} is not an installed sandbox backend (installed: {', '.join(installed)}); "
                             "use one of those, or install the package that provides it (e.g. cellgate[kubernetes])")
        return name

    @field_validator("allowed_imports")
    @classmethod
    def _modules(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*$", name):
                raise ValueError(f"{name!r} is not a module name (no leading underscores)")
        return names


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


class Settings(StrictModel):
    """The core's sections. ``load_settings`` returns an instance of ``settings_type()``, this class with the
    installed extensions' sections added; read those with ``section``."""

    tools: ToolsConfig = ToolsConfig()
    sandbox: SandboxSettings = SandboxSettings()
    audit: AuditConfig = AuditConfig()
    frontend: FrontendSettings = FrontendSettings()
    policy: Policy = Policy()
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
    try:
        return settings_type()(**data, base_dir=str(path.parent), source=str(path))
    except ValidationError as exc:
        text = path.read_text()

        def where(loc: Sequence[Any]) -> str:
            line = locate(text, list(loc))
            return f"{path}:{line}" if line else str(path)

        raise ConfigError("\n".join(validation_problems(exc, where))) from None


def locate(text: str, loc: list[Any]) -> int | None:
    """The line (1-based) where a key path most likely appears in a TOML file."""
    lines = text.splitlines()
    position, found = 0, None
    for part in (str(p) for p in loc if not isinstance(p, int)):
        key = re.escape(part)
        pattern = re.compile(rf'(^\s*"?{key}"?\s*=)|(^\s*\[\[?[^\]]*\b{key}\b[^\]]*\]\]?)|([{{,]\s*{key}\s*=)')
        for index in range(position, len(lines)):
            if pattern.search(lines[index]):
                position, found = index, index + 1
                break
    return found
