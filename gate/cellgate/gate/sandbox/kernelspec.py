"""The ``cellgate`` kernelspec, installed for any Jupyter frontend.

The installed spec runs cellgate's own interpreter as an ordinary kernel
process (``LAUNCHER_MODULE``), so a frontend in any environment, with nothing
of cellgate installed, can launch it. Inside cellgate's environment the same
name resolves to the in-process ``cellgate-gvisor`` provisioner
(``CellgateSpecManager``): ``Session``, replay and the launcher itself use it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

KERNEL_NAME = "cellgate"
PROVISIONER_NAME = "cellgate-gvisor"
LAUNCHER_MODULE = "cellgate.gate.session.launcher"
DISPLAY_NAME = "cellgate (gVisor)"


def launcher_argv() -> list[str]:
    """The installed spec's command: this environment's interpreter, by absolute path."""
    return [sys.executable, "-m", LAUNCHER_MODULE, "-f", "{connection_file}"]


def spec_dict() -> dict[str, Any]:
    """The installed spec: a plain kernel command any frontend launches (no provisioner to find)."""
    return {
        "argv": launcher_argv(),
        "display_name": DISPLAY_NAME,
        "language": "python",
        "interrupt_mode": "message",  # the launcher forwards interrupt_request to the sandboxed kernel
        "metadata": {"debugger": False},
    }


def provisioner_spec_dict() -> dict[str, Any]:
    """The in-process spec: jupyter_client hands the launch to the ``cellgate-gvisor`` provisioner."""
    return {
        # The provisioner builds the sandbox's own command; this argv is what
        # runs *inside* gVisor and is kept for tools that display it.
        "argv": [sys.executable, "-m", "cellgate.kernel", "-f", "{connection_file}"],
        "display_name": DISPLAY_NAME,
        "language": "python",
        "interrupt_mode": "message",
        "metadata": {"kernel_provisioner": {"provisioner_name": PROVISIONER_NAME}, "debugger": False},
    }


def install(user: bool = False, prefix: str | None = None) -> str:
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "kernel.json").write_text(json.dumps(spec_dict(), indent=1))
        return str(KernelSpecManager().install_kernel_spec(folder, KERNEL_NAME, user=user, prefix=prefix))


class CellgateSpecManager(KernelSpecManager):
    """Gives ``cellgate`` as the in-process provisioner spec, whatever is installed (used by Session and the
    launcher: both reach into the provisioner)."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name == KERNEL_NAME:
            return KernelSpec(resource_dir="", **provisioner_spec_dict())
        return super().get_kernel_spec(kernel_name)
