"""Versions of the parts that shape a run, for the audit notebook."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def versions() -> dict[str, str]:
    result = {}
    for name in ("cellgate", "ipykernel", "jupyter_client", "nbformat", "pyzmq"):
        try:
            result[name] = version(name)
        except PackageNotFoundError:
            result[name] = "unknown"
    return result
