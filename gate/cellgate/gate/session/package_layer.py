"""A session's package layer: the folder ``%pip install`` fills (``calls.packages``), made when ``[packages]``
allows anything, bound into every sandbox of the session (restarts keep it) and removed when the session ends."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cellgate.gate._errors import ConfigError
from cellgate.gate._guarded import remove_tree_quietly
from cellgate.gate.calls.packages import PackageInstaller
from cellgate.gate.config import Settings
from cellgate.gate.sandbox.backend import SandboxBackend
from cellgate.gate.sandbox.images.build import target_options
from cellgate.gate.sandbox.runtime_dir import private_dir, run_root


def target_of(image: Any) -> list[str]:
    """pip's options for the sandbox's interpreter and platform, from the record's word on its image ([] : the
    host's own interpreter, which ``host`` and isolation ``none`` run)."""
    if not isinstance(image, Mapping) or not image.get("digest"):
        return []
    debian = image.get("debian")
    listed = debian.get("packages", []) if isinstance(debian, Mapping) else []
    libc = next((p for p in listed if str(p).startswith("libc6=")), "")
    glibc = re.match(r"libc6=(?:\d+:)?(\d+)\.(\d+)", str(libc))
    if not glibc:
        raise ConfigError(f"the image {image.get('name')!r} names no libc6 version: rebuild it with `cellgate image "
                          "build` to install packages into it")
    return target_options(str(image["python_version"]), (int(glibc.group(1)), int(glibc.group(2))))


def package_installer(settings: Settings, backend: SandboxBackend, runtime: Mapping[str, Any],
                      session_id: str, always: bool = False) -> PackageInstaller | None:
    """The session's installer and its (new, empty) layer; None when ``[packages] allow`` is empty (unless
    ``always``: a replay's layer, for the recorded wheels)."""
    packages = settings.packages
    if not packages.allow and not always:
        return None
    if not backend.binds_package_layer:
        raise ConfigError(f"[packages] allow is set, but the {backend.name!r} sandbox backend cannot bind a package "
                          "layer: build an image with the packages instead (`cellgate image build`)")
    layer = private_dir(run_root() / "packages") / session_id
    layer.mkdir(mode=0o755)  # bound read-only into the sandbox, where its user reads it
    layer.chmod(0o755)
    return PackageInstaller(layer, target_of(runtime.get("image")), packages.allow, packages.max_mb << 20,
                            max_unpacked_bytes=packages.unpacked_limit_mb << 20)


def remove(installer: PackageInstaller | None) -> None:
    if installer is not None:
        remove_tree_quietly(installer.layer)
