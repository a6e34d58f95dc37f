"""Packages through the gate: ``%pip install`` in a cell is the gated call ``pip_install``.

The sandbox has no network and stays without one. A cell's ``%pip install NAME[==VERSION] ...`` calls the tool
``pip_install``, which the policy decides like any other (``[policy.tools.pip_install]``: allow, approve or deny;
unnamed, it falls to ``[policy] default``). Allowed, the host:

1. resolves the requirements with pip for the sandbox's Python and platform, from the index this host's pip is
   configured for, **wheels only** (``--only-binary=:all:``: an sdist is never built, building runs its code on
   the host), within ``[packages] max_mb``;
2. refuses the whole install, installing nothing, if any resolved distribution (a dependency too) is not allowed
   by ``[packages] allow``;
3. keeps each wheel by its sha256 in the wheel cache and unpacks it itself (``calls.wheels``: no code runs) into
   the session's package layer, a host folder bound read-only into the sandbox and on its path: each wheel's
   central directory is checked against ``[packages] max_unpacked_mb`` (what the layer may hold), ``max_mb`` (one
   file), a count of files and a compression ratio before anything is written, then copied counted; a cached
   wheel is hashed again, every time, as it is read for unpacking.

The call's result names every installed distribution (name, version, sha256): the record has it, and a replay
installs exactly those wheels again from the cache, by hash.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.registry import Tool
from cellgate.gate.calls.wheels import Limits, open_verified
from cellgate.gate.calls.wheels import PackageRefused as PackageRefused  # where callers have found it
from cellgate.gate.calls.wheels import install as install_wheels
from cellgate.gate.sandbox.images.spec import REQUIREMENT
from cellgate.gate.sandbox.images.store import file_sha256

TOOL_NAME: Final = "pip_install"
PIP_TIMEOUT: Final = 600.0


def wheel_cache() -> Path:
    """Where wheels are kept by sha256, for replays: beside the image store."""
    configured = os.environ.get("CELLGATE_WHEEL_CACHE")
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return Path("/var/lib/cellgate/wheels")
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "cellgate" / "wheels"


def parse_allow(allow: Sequence[str]) -> dict[str, Requirement]:
    """``[packages] allow`` as requirements by canonical name; ConfigError naming a malformed entry."""
    allowed: dict[str, Requirement] = {}
    for entry in allow:
        try:
            requirement = Requirement(entry)
        except InvalidRequirement as exc:
            raise ConfigError(f"[packages] allow: {entry!r} is not a requirement (name, then versions: "
                              f"'humanize>=4,<5'): {exc}") from None
        if requirement.url or requirement.marker:
            raise ConfigError(f"[packages] allow: {entry!r}: a name and versions only, no URL or marker")
        allowed[canonicalize_name(requirement.name)] = requirement
    return allowed


class PackageInstaller:
    """One session's package layer and the ``pip_install`` tool that fills it."""

    def __init__(self, layer: Path, target: Sequence[str], allow: Sequence[str], max_bytes: int,
                 cache: Path | None = None, max_unpacked_bytes: int | None = None) -> None:
        self.layer = layer  # bound read-only into the sandbox (the backend's ``package_layer``)
        self.target = list(target)  # pip's options for the sandbox's interpreter and platform ([] : this one's)
        self.allowed = parse_allow(allow)
        self.max_bytes = max_bytes
        # [packages] max_unpacked_mb: what the layer may hold, unpacked; max_mb: one file of it
        self.limits = Limits(total_bytes=max_unpacked_bytes or 4 * max_bytes, file_bytes=max_bytes)
        self.cache = cache or wheel_cache()
        self.installed: list[dict[str, str]] = []

    def tool(self) -> Tool:
        def pip_install(requirements: list[str]) -> dict[str, Any]:
            """Install Python packages (wheels only, each allowed by [packages] allow) into the sandbox.

            Args:
                requirements: requirements such as "humanize" or "humanize==4.9.0"
            """
            return self.install(requirements)

        return Tool.from_function(pip_install, name=TOOL_NAME, source="cellgate: packages through the gate")

    # -- one install
    def install(self, requirements: Sequence[str]) -> dict[str, Any]:
        if not requirements:
            raise PackageRefused("name at least one package: %pip install NAME[==VERSION] ...")
        for requirement in requirements:
            if not isinstance(requirement, str) or not REQUIREMENT.match(requirement) or len(requirement) > 200:
                raise PackageRefused(f"{str(requirement)[:200]!r} is not a requirement of the form NAME[==VERSION] "
                                     "(no URL, path or pip option: packages come from the host's index only)")
            name = canonicalize_name(Requirement(requirement).name)
            if name not in self.allowed:
                raise PackageRefused(self._not_allowed(name))
        with tempfile.TemporaryDirectory(prefix="cellgate-pip-") as scratch:
            wheels = self._download(list(requirements), Path(scratch))
            found = [self._check(wheel) for wheel in wheels]
            self.cache.mkdir(parents=True, exist_ok=True)
            kept = [(self._keep(wheel, entry["sha256"]), entry["sha256"]) for wheel, entry in zip(wheels, found,
                                                                                                     strict=True)]
            self._unpack(kept)
        self.installed += found
        return {"installed": found}

    def reinstall(self, result: Any) -> list[dict[str, str]]:
        """A recorded install's wheels again, from the cache by sha256 (a replay); PackageRefused if one is gone."""
        entries = result.get("installed") if isinstance(result, dict) else None
        if not isinstance(entries, list):
            raise PackageRefused("the recorded pip_install result names no installed wheels")
        wheels = []
        for entry in entries:
            digest, file = str(entry.get("sha256", "")), str(entry.get("file", ""))
            if not re.fullmatch(r"[0-9a-f]{64}", digest) or not re.fullmatch(r"[A-Za-z0-9._+-]+\.whl", file):
                raise PackageRefused(f"the recorded wheel {file[:100]!r} (sha256 {digest[:64]!r}) is not one this "
                                     "host could have kept")
            wheels.append((self.cache / digest / file, digest))  # missing or changed: refused as it is opened
        self._unpack(wheels)
        return [dict(entry) for entry in entries]

    # -- steps
    def _not_allowed(self, name: str) -> str:
        allowed = ", ".join(sorted(str(r) for r in self.allowed.values())) or "nothing"
        return (f"{name} is not allowed by [packages] allow (allowed: {allowed}); add it there to let sessions "
                "install it")

    def _pip(self, step: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *argv],
                                  capture_output=True, text=True, timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise PackageRefused(f"pip {step} did not finish within {PIP_TIMEOUT:g} s") from None

    def _download(self, requirements: list[str], folder: Path) -> list[Path]:
        done = self._pip("download", ["download", "--quiet", "--dest", str(folder), "--only-binary=:all:",
                                      *self.target, *requirements])
        if done.returncode != 0:
            said = "\n".join(line for line in done.stderr.splitlines() if "is ignored:" not in line).strip()
            if "No matching distribution" in said or "Could not find a version" in said:
                raise PackageRefused(f"no wheel of {' '.join(requirements)} for the sandbox's Python and platform "
                                     f"(a package with only a source distribution is never built: building runs its "
                                     f"code on the host): {said[-500:]}")
            raise PackageRefused(f"pip could not resolve {' '.join(requirements)}: {said[-800:]}")
        files = sorted(folder.iterdir())
        if any(not f.name.endswith(".whl") for f in files):
            raise PackageRefused("pip fetched something other than a wheel: nothing was installed")
        total = sum(f.stat().st_size for f in files)
        if total > self.max_bytes:
            raise PackageRefused(f"the wheels come to {total:,} bytes, over [packages] max_mb = "
                                 f"{self.max_bytes >> 20} ({self.max_bytes:,} bytes): nothing was installed")
        return files

    def _check(self, wheel: Path) -> dict[str, str]:
        """The wheel's name, version and sha256, if ``[packages] allow`` admits it (dependencies too)."""
        name, version = wheel.name.split("-")[:2]
        canonical = canonicalize_name(name)
        allowed = self.allowed.get(canonical)
        if allowed is None:
            raise PackageRefused(self._not_allowed(canonical) + " (it is a dependency of what was asked for); "
                                 "nothing was installed")
        if not allowed.specifier.contains(version, prereleases=True):
            raise PackageRefused(f"{canonical} {version} is outside [packages] allow's {allowed}: nothing was installed")
        return {"name": canonical, "version": version, "sha256": file_sha256(wheel), "file": wheel.name}

    def _keep(self, wheel: Path, digest: str) -> Path:
        """The wheel in the cache by its sha256, written whole before it has its name (a kept one stays)."""
        cached = self.cache / digest / wheel.name
        if not os.path.lexists(cached):
            cached.parent.mkdir(exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=cached.parent, prefix=".keep-", delete=False) as out, \
                    wheel.open("rb") as source:
                shutil.copyfileobj(source, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(out.name, cached)
        return cached

    def _unpack(self, wheels: list[tuple[Path, str]]) -> None:
        """The wheels (path, sha256) into the layer: each read once and hashed, then unpacked within the bounds."""
        with contextlib.ExitStack() as opened:
            verified = [(path.name, opened.enter_context(open_verified(path, digest, self.cache)))
                        for path, digest in wheels]
            install_wheels(self.layer, verified, self.limits, compile_pyc=self._compiles_for_this_python())

    def _compiles_for_this_python(self) -> bool:
        """Byte-compile only for a sandbox Python of this one's version (another would not read the files)."""
        if "--python-version" not in self.target:
            return True
        wanted = self.target[self.target.index("--python-version") + 1]
        return wanted == f"{sys.version_info.major}.{sys.version_info.minor}"
