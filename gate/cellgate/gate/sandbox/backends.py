"""The backend factory: a sandbox backend by its name in the ``cellgate.sandbox_backends`` entry points.

As jupyter_client's provisioner factory: every backend, the core's own ``local`` (``sandbox.local``) like an
extension's (``kubernetes``), is an entry point naming a ``SandboxBackend`` subclass; the seam imports none.
"""

from __future__ import annotations

from cellgate.gate._entry_points import entry_points
from cellgate.gate._errors import ConfigError
from cellgate.gate.sandbox.backend import SandboxBackend
from cellgate.gate.sandbox.settings import BACKENDS_GROUP

DEFAULT_BACKEND = "local"


def installed_backends() -> dict[str, str]:
    """The installed backends: entry point name -> what it names."""
    return {entry.name: entry.value for entry in entry_points(group=BACKENDS_GROUP)}


def load_backend(name: str) -> type[SandboxBackend]:
    """The backend class registered as ``name`` in the ``cellgate.sandbox_backends`` entry points."""
    found = [entry for entry in entry_points(group=BACKENDS_GROUP) if entry.name == name]
    if not found:
        installed = ", ".join(sorted(installed_backends())) or "none"
        raise ConfigError(f"[sandbox] backend = {name!r} is not an installed sandbox backend (installed: {installed});"
                          " use one of those, or install the package that provides it (e.g. cellgate[kubernetes])")
    if len({entry.value for entry in found}) > 1:  # e.g. a package that would replace the core's "local"
        raise ConfigError(f"the sandbox backend {name!r} is registered more than once in {BACKENDS_GROUP} "
                          f"({', '.join(sorted({entry.value for entry in found}))}); uninstall all but one")
    entry = found[0]
    backend = entry.load()
    if not (isinstance(backend, type) and issubclass(backend, SandboxBackend)):
        raise ConfigError(f"entry point {name} = {entry.value!r} (group {BACKENDS_GROUP}) does not name a "
                          "SandboxBackend subclass; fix or uninstall the package that provides it")
    return backend


__all__ = ["BACKENDS_GROUP", "DEFAULT_BACKEND", "installed_backends", "load_backend"]
