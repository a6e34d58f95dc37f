"""The ``cellgate`` kernelspec, installed for any Jupyter frontend."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpec, KernelSpecManager, NoSuchKernel

KERNEL_NAME = "cellgate"
PROVISIONER_NAME = "cellgate-gvisor"


def spec_dict() -> dict[str, Any]:
    return {
        # The provisioner builds the sandbox's own command; this argv is what
        # runs *inside* gVisor and is kept for tools that display it.
        "argv": [sys.executable, "-m", "cellgate.kernel", "-f", "{connection_file}"],
        "display_name": "cellgate (gVisor)",
        "language": "python",
        "interrupt_mode": "message",
        "metadata": {"kernel_provisioner": {"provisioner_name": PROVISIONER_NAME}, "debugger": False},
    }


def install(user: bool = False, prefix: str | None = None) -> str:
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "kernel.json").write_text(json.dumps(spec_dict(), indent=1))
        return str(KernelSpecManager().install_kernel_spec(folder, KERNEL_NAME, user=user, prefix=prefix))


class CellgateSpecManager(KernelSpecManager):
    """Knows the cellgate spec even when it is not installed (used by Session)."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        if kernel_name == KERNEL_NAME:
            try:
                return super().get_kernel_spec(kernel_name)
            except NoSuchKernel:
                return KernelSpec(resource_dir="", **spec_dict())
        return super().get_kernel_spec(kernel_name)
