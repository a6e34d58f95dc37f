"""Finding gVisor's ``runsc`` and the platform it can use here.

cellgate fails closed: if no usable runsc is found, it refuses to run code
and says how to get one. The newer static build that ``cellgate doctor --fix``
installs (Debian trixie's runsc, which offers the faster systrap platform)
is preferred over bookworm's package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from cellgate.gate._errors import SandboxUnavailable

# Where `cellgate doctor --fix` installs the newer runsc build.
PREFERRED_RUNSC = "/usr/local/libexec/cellgate/runsc"
PLATFORM_PREFERENCE = ("systrap", "ptrace")  # kvm hangs on VMs without nested virtualisation
FIX_HINT = "run `cellgate doctor --fix` (as root) to install gVisor's runsc, or set [sandbox] runsc in cellgate.toml"


@dataclass(frozen=True)
class Runsc:
    path: str
    version: str
    platform: str
    platforms: tuple[str, ...]

    def describe(self) -> dict[str, str]:
        return {"runtime": "gvisor", "runsc": self.path, "runsc_version": self.version, "platform": self.platform}


def candidates(configured: str | None = None) -> list[str]:
    found = []
    for path in (configured, os.environ.get("CELLGATE_RUNSC"), PREFERRED_RUNSC, shutil.which("runsc")):
        if path and path not in found:
            found.append(path)
    return found


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout


@lru_cache(maxsize=8)
def probe(path: str, platform: str | None = None) -> Runsc:
    """Version and platforms of one runsc binary; raises SandboxUnavailable."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SandboxUnavailable(f"runsc not found at {path!r}; {FIX_HINT}")
    try:
        version_text = _run([path, "--version"])
        platforms_text = _run([path, "help", "platforms"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"runsc at {path!r} does not work: {exc}; {FIX_HINT}") from None
    version = version_text.splitlines()[0].removeprefix("runsc version ").strip() if version_text else "unknown"
    platforms = tuple(line.strip() for line in platforms_text.splitlines() if line.strip())
    if platform is None:
        usable = [p for p in PLATFORM_PREFERENCE if p in platforms]
        if not usable:
            raise SandboxUnavailable(f"runsc at {path!r} offers no usable platform (has {platforms}); {FIX_HINT}")
        platform = usable[0]
    elif platform not in platforms:
        raise SandboxUnavailable(
            f"runsc at {path!r} has no platform {platform!r} (it has {', '.join(platforms)}); "
            "choose one of those in [sandbox] platform"
        )
    return Runsc(path=path, version=version, platform=platform, platforms=platforms)


def find(configured: str | None = None, platform: str | None = None) -> Runsc:
    """The best usable runsc, or SandboxUnavailable saying how to get one.

    An explicit choice (``[sandbox] runsc``, else ``CELLGATE_RUNSC``) is the
    only one tried: if it does not work, cellgate says so rather than quietly
    using another binary.
    """
    explicit = configured or os.environ.get("CELLGATE_RUNSC")
    if explicit:
        return probe(explicit, platform)
    paths = candidates()
    errors = []
    for path in paths:
        try:
            return probe(path, platform)
        except SandboxUnavailable as exc:
            errors.append(str(exc))
    raise SandboxUnavailable(
        "gVisor's runsc is not installed, so cellgate refuses to run code (it never runs "
        f"unsandboxed unless you pass --isolation=none); {FIX_HINT}"
        + (f". Tried: {'; '.join(errors)}" if errors else "")
    )
