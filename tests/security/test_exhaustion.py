"""Resource exhaustion from a cell (SECURITY.md X1, X2, X4-X6, X8, X9, and a thread bomb).

Each case runs in the real sandbox while a host-side watcher samples the
host's available memory and process count; the test asserts the case's
recorded outcome, that the host stayed within the sandbox's own limits, and
that the session is usable afterwards (after the automatic restart the
kernel-death cases need). X4 (SIGINT ignored) is in tests/test_limits.py.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import pytest

pytestmark = pytest.mark.gvisor

MEMORY_MB = 512
PIDS = 128
# What the runsc processes themselves may add on the host beyond the sandbox's memory limit.
RUNSC_OVERHEAD_MB = 700


def mem_available_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


def host_processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


class HostWatch:
    """Samples the host's available memory and process count until stopped."""

    def __init__(self) -> None:
        self.before_mem, self.before_procs = mem_available_mb(), host_processes()
        self.lowest_mem, self.most_procs = self.before_mem, self.before_procs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.lowest_mem = min(self.lowest_mem, mem_available_mb())
            self.most_procs = max(self.most_procs, host_processes())

    def __enter__(self) -> HostWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass(frozen=True)
class Case:
    program: str
    statuses: tuple[str, ...]
    error: str | None = None  # "Name: words" the recorded error must contain
    limit: str | None = None  # a limit the cell must have hit


CASES = {
    "X1 memory bomb": Case("hoard = []\nwhile True:\n    hoard.append(bytearray(1 << 27))", ("error",), "MemoryError"),
    "X1 one huge allocation": Case("block = bytearray(1 << 40)", ("error",), "MemoryError"),
    # Each forked kernel copy is charged to the sandbox: the cgroup backstop ends it as `memory`.
    "X2 fork bomb": Case("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
                         ("memory", "timeout", "killed")),
    "thread bomb": Case("import threading, time\nwhile True:\n"
                        "    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()",
                        ("error",), "RuntimeError: can't start new thread"),
    "X5 regex backtracking holding the GIL": Case("import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')",
                                                  ("killed",), limit="timeout"),
    "X6 output flood": Case("while True:\n    print('A' * 65536)", ("timeout", "error"), limit="output"),
    "X8 disk fill": Case("f = open('/tmp/fill', 'wb')\nwhile True:\n    f.write(b'\\0' * (1 << 24))", ("error",),
                         "OSError: [Errno 28] No space left on device"),
    "X9 FD exhaustion": Case("handles = [open('/dev/null') for _ in range(10 ** 6)]", ("error",),
                             "OSError: [Errno 24] Too many open files"),
}


@pytest.fixture(scope="module")
def constrained(session_factory):
    return session_factory(memory_mb=MEMORY_MB, pids=PIDS, tmp_mb=64, open_files=256, cell_timeout=8.0,
                           interrupt_grace=2.0, output_limit_kb=256)


@pytest.mark.parametrize("name", list(CASES))
def test_exhaustion_is_contained_reported_and_survivable(constrained, name: str) -> None:
    case = CASES[name]
    box = constrained
    box.restart()  # each case starts from a fresh kernel: what one leaves behind must not decide the next
    assert box.execute("marker = 'kept'").ok
    with HostWatch() as host:
        result = box.execute(case.program)
    assert result.status in case.statuses, (result.status, result.error, result.limits_hit)
    if case.error:
        assert result.error is not None
        assert case.error in f"{result.error['ename']}: {result.error['evalue']}", result.error
    if case.limit:
        assert case.limit in result.limits_hit, result.limits_hit
    # The host: memory no lower than the sandbox's own limit allows, process count bounded by its pids limit.
    assert host.before_mem - host.lowest_mem <= MEMORY_MB + RUNSC_OVERHEAD_MB, vars(host)
    assert host.most_procs - host.before_procs <= PIDS + 16, vars(host)
    # The session: the same kernel with its variables when it survived, a fresh one when it was killed
    # (restarted by the session itself after the memory backstop).
    if result.status == "memory":
        assert not box.session.dead
        assert box.execute("print('fresh', 'marker' in globals())").stdout == "fresh False\n"
    elif result.status == "killed":
        assert box.session.dead
        box.restart()
        assert box.execute("print('fresh', 'marker' in globals())").stdout == "fresh False\n"
    else:
        assert box.execute("print(marker)").stdout == "kept\n"
