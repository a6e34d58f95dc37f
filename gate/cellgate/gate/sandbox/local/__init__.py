"""The ``local`` sandbox backend's parts: runsc on this host (``local_backend.LocalBackend``).

Below the seam: nothing outside ``cellgate.gate.sandbox`` imports these but the backends factory (through
the ``local`` entry point) and the local host's own diagnosis (``cellgate doctor``).
"""
