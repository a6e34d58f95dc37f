"""Entry point inside the sandbox: ``python -m cellgate.kernel -f CONNECTION_FILE``."""

from ipykernel.kernelapp import IPKernelApp

from .kernel import CellgateKernel, apply_memory_limit

if __name__ == "__main__":
    apply_memory_limit()
    IPKernelApp.launch_instance(kernel_class=CellgateKernel)
