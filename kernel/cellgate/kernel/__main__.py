"""Entry point inside the sandbox: ``python -m cellgate.kernel -f CONNECTION_FILE``."""

import sys

from . import snapshot
from .framestack import with_roomy_stack


def main() -> None:
    connection = snapshot.connection_file(sys.argv)
    if connection is not None:
        snapshot.wait_for_connection(connection)  # a snapshot is taken here (see ``snapshot``)

    from .kernel import CellgateKernel, CellgateKernelApp, apply_memory_limit

    apply_memory_limit()
    CellgateKernelApp.launch_instance(kernel_class=CellgateKernel)


if __name__ == "__main__":
    with_roomy_stack(main)
