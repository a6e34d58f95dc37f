"""Versions of the parts that shape a run, for the audit notebook."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


def versions() -> dict[str, str]:
    return dict(_read())  # a copy: the record is the caller's


@functools.lru_cache(maxsize=1)  # read once: each session's record states them
def _read() -> dict[str, str]:
    result = {}
    for name in ("cellgate", "ipykernel", "jupyter_client", "nbformat", "pyzmq"):
        try:
            result[name] = version(name)
        except PackageNotFoundError:
            result[name] = "unknown"
    return result
