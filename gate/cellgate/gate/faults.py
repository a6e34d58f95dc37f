"""Failpoints for crash tests: ``CELLGATE_FAILPOINT=<name>`` kills the host process there.

Only the test suite sets the variable; in normal runs every call is a no-op.
"""

from __future__ import annotations

import os
import signal


def failpoint(name: str) -> None:
    if os.environ.get("CELLGATE_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
