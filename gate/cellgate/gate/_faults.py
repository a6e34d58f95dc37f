"""Failpoints for crash tests: ``CELLGATE_FAILPOINT=<name>[:<n>]`` SIGKILLs the host
process the n-th time (default: the first) it reaches that point.

Only the test suite sets the variable; in normal runs every call is a no-op.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

_hits: Counter[str] = Counter()


def failpoint(name: str) -> None:
    wanted = os.environ.get("CELLGATE_FAILPOINT")
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    _hits[name] += 1
    if _hits[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
