"""``%pip install NAME[==VERSION] ...`` in a cell: the gated call ``pip_install`` (the host's ``calls.packages``).

The sandbox has no network, so IPython's own ``%pip`` (pip in a subprocess, here) could not fetch anything. This
one asks the gate: the policy decides, the host fetches wheels only and unpacks them into the session's package
layer (on ``sys.path``, read-only), and the record names each wheel by sha256.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
from typing import Any

from . import runtime
from .errors import ToolNotFound

TOOL = "pip_install"
USAGE = ("cellgate: `%pip install NAME[==VERSION] ...` installs packages through the gate (the sandbox has no "
         "network); no other pip command or option is available here")


def pip(line: str) -> None:
    """%pip install NAME[==VERSION] ...: install packages through the gate (wheels the host allows)."""
    words = shlex.split(line)
    if not words or words[0] != "install" or len(words) < 2 or any(w.startswith("-") for w in words[1:]):
        raise ValueError(USAGE)
    try:
        result: Any = runtime.call(TOOL, {"requirements": words[1:]})
    except ToolNotFound:  # the session has no package layer: [packages] allow is empty
        raise PackagesNotConfigured(words[1:]) from None
    importlib.invalidate_caches()  # the layer's folders were listed empty when the kernel started
    for wheel in result.get("installed", []) if isinstance(result, dict) else []:
        print(f"installed {wheel.get('name')}=={wheel.get('version')} (sha256 {str(wheel.get('sha256'))[:16]}…)")


class PackagesNotConfigured(RuntimeError):
    """``%pip install`` in a session whose ``[packages] allow`` is empty: one line, no traceback."""

    def __init__(self, requirements: list[str]) -> None:
        names = [found.group() for found in map(re.compile(r"[A-Za-z0-9._-]+").match, requirements) if found]
        example = json.dumps(names[:3] or ["NAME"])
        super().__init__(
            f"%pip install needs the packages allowed in the session's cellgate.toml: [packages] allow = {example} "
            "(names and versions, dependencies included), and a policy that allows the call pip_install "
            "([policy.tools.pip_install] decision = \"allow\" unless [policy] default allows it); start a new "
            "session after the change (docs/sandbox-images.md, \"Packages at run time\")")

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def register(shell: Any) -> None:
    shell.register_magic_function(pip, "line", "pip")
