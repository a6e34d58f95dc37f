"""``%pip install NAME[==VERSION] ...`` in a cell: the gated call ``pip_install`` (the host's ``calls.packages``).

The sandbox has no network, so IPython's own ``%pip`` (pip in a subprocess, here) could not fetch anything. This
one asks the gate: the policy decides, the host fetches wheels only and unpacks them into the session's package
layer (on ``sys.path``, read-only), and the record names each wheel by sha256.
"""

from __future__ import annotations

import importlib
import shlex
from typing import Any

from . import runtime

TOOL = "pip_install"
USAGE = ("cellgate: `%pip install NAME[==VERSION] ...` installs packages through the gate (the sandbox has no "
         "network); no other pip command or option is available here")


def pip(line: str) -> None:
    """%pip install NAME[==VERSION] ...: install packages through the gate (wheels the host allows)."""
    words = shlex.split(line)
    if not words or words[0] != "install" or len(words) < 2 or any(w.startswith("-") for w in words[1:]):
        raise ValueError(USAGE)
    result: Any = runtime.call(TOOL, {"requirements": words[1:]})
    importlib.invalidate_caches()  # the layer's folders were listed empty when the kernel started
    for wheel in result.get("installed", []) if isinstance(result, dict) else []:
        print(f"installed {wheel.get('name')}=={wheel.get('version')} (sha256 {str(wheel.get('sha256'))[:16]}…)")


def register(shell: Any) -> None:
    shell.register_magic_function(pip, "line", "pip")
