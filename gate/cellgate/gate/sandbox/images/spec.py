"""What a sandbox image is made of: a declarative spec, and the two built-in profiles.

An image is a Debian root filesystem (``debian``: extra packages over the essential set), Python packages
(``python``: requirements, resolved once and locked with hashes when the image is built) and cellgate's kernel
slice at the host's version. Specs come from the built-in profiles below or from a spec file
(``cellgate-image.toml``, or a ``cellgate.toml``), one ``[images.NAME]`` table each::

    [images.geo]
    description = "the data stack and shapely"
    debian = ["fontconfig", "fonts-dejavu-core"]
    python = ["pandas>=2", "shapely"]
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Final

from pydantic import Field, ValidationError, field_validator

from cellgate.gate._errors import ConfigError
from cellgate.gate._model import StrictModel, validation_problems
from cellgate.gate.sandbox.images.store import NAME_PATTERN

# A requirement of the form name[extras] and version clauses: never a URL, a path, a marker or a pip option (they
# would fetch or build from elsewhere than the index). Images' specs and `%pip install` take only these.
REQUIREMENT: Final = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?\s*([<>=!~]=?[^;@\s,]+(,\s*[<>=!~]=?[^;@\s,]+)*)?$")
# The kernel slice's own requirements (kernel/pyproject.toml), in every image.
KERNEL_REQUIREMENTS: Final = ("ipykernel>=7.4", "jupyter_client>=8.10", "pyzmq>=26", "traitlets>=5.14",
                              "typing_extensions>=4.6", "RestrictedPython>=8.0", "orjson>=3.10")
BASE_DEBIAN: Final = ("python3", "libstdc++6")  # the interpreter; the C++ runtime manylinux wheels expect (pyzmq)
# Fontconfig and a font: without them every chart cell printed "Fontconfig error" into the record.
FONTS: Final = ("fontconfig", "fonts-dejavu-core")


class ImageSpec(StrictModel):
    name: str = Field(pattern=NAME_PATTERN, description="the image's name: [sandbox] image = NAME")
    description: str = ""
    debian: list[str] = Field(default_factory=list, description="Debian packages over the essential set")
    python: list[str] = Field(default_factory=list, description="Python requirements (pip's syntax; wheels only)")
    preload: list[str] = Field(default_factory=list, description="modules imported before the snapshot a sandbox "
                               "starts from, so that a cell finds them loaded (e.g. pandas)")
    warm_completion: bool = Field(default=False, description="the snapshot holds jedi's parse of the builtins, so "
                                  "a session's first Tab completion takes ~0.1 s instead of ~4 s in gVisor; each "
                                  "sandbox then holds ~29 MB more")

    @field_validator("preload")
    @classmethod
    def _preload(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$", name):
                raise ValueError(f"{name!r} is not a module name")
        return names

    @field_validator("debian")
    @classmethod
    def _debian(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(r"^[a-z0-9][a-z0-9+.-]+$", name):
                raise ValueError(f"{name!r} is not a Debian package name")
        return names

    @field_validator("python")
    @classmethod
    def _python(cls, requirements: list[str]) -> list[str]:
        for requirement in requirements:
            if not REQUIREMENT.match(requirement):
                raise ValueError(f"{requirement!r} is not a requirement of the form name[extras]>=version "
                                 "(no URL, path or option)")
        return requirements

    def debian_packages(self) -> list[str]:
        """Every Debian package asked for: Python itself, then the spec's own."""
        return [*BASE_DEBIAN, *(name for name in self.debian if name not in BASE_DEBIAN)]

    def requirements(self) -> list[str]:
        """Everything pip resolves for the image: the kernel's requirements, then the spec's own."""
        return [*KERNEL_REQUIREMENTS, *self.python]


PROFILES: Final = {
    "minimal": ImageSpec(name="minimal", description="the kernel and what it needs (the default)", debian=[*FONTS]),
    "data": ImageSpec(
        name="data", description="the data stack: numpy, pandas, pyarrow, matplotlib, scipy, scikit-learn, polars, "
                                 "the HTTP clients requests and httpx, and pip (through the gate: docs/network.md)",
        debian=[*FONTS],
        python=["numpy", "pandas", "pyarrow", "matplotlib", "scipy", "scikit-learn", "polars", "requests", "httpx",
                "pip"],
        preload=["numpy", "pandas", "matplotlib"],  # not pyplot: it binds IPython's display hooks, which come later
    ),
}


def load_specs(path: Path) -> dict[str, ImageSpec]:
    """The ``[images.NAME]`` tables of a spec file; ConfigError naming the file and each problem."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read the image spec file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    tables = data.get("images", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: [images] must be a table of [images.NAME] tables")
    specs: dict[str, ImageSpec] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: images.{name} must be a table")
        try:
            specs[name] = ImageSpec(name=name, **table)
        except ValidationError as exc:
            problems = validation_problems(exc)
            raise ConfigError(f"{path}: images.{name}: " + "; ".join(problems)) from None
    return specs


def find_spec(name: str, spec_file: Path | None) -> ImageSpec:
    """The spec called ``name``: from ``spec_file`` if given (and it defines it), else a built-in profile."""
    if spec_file is not None:
        specs = load_specs(spec_file)
        if name in specs:
            return specs[name]
    if name in PROFILES:
        return PROFILES[name]
    known = sorted({*PROFILES, *(load_specs(spec_file) if spec_file else {})})
    where = f" or in {spec_file}" if spec_file else " (give a spec file with --spec to build your own)"
    raise ConfigError(f"no image spec called {name!r} among the built-in profiles{where}; known: {', '.join(known)}")
