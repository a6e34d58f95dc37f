"""Resource exhaustion from a cell (SECURITY.md X1, X2, X4-X6, X8, X9, and a thread bomb).

Each case runs in the real sandbox while a watcher samples the sandbox's own
cgroup (the memory charged to it, the host processes in it) and this test
process, where the gate and its relay run; the test asserts the case's
recorded outcome, that the sandbox stayed within its own configured limits and
the gate's memory within a bound, and that the session is usable afterwards
(after the automatic restart the kernel-death cases need). Other workloads on
the machine move neither measure. X4 (SIGINT ignored) is in
tests/sandbox/test_limits.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

# CPU or wall time counts here: never beside another such test (tests/conftest.py, the xdist groups).
pytestmark = pytest.mark.xdist_group("cpu")

MEMORY_MB = 512
PIDS = 128
# How much this process (the gate, its relay and the recorder) may grow while a cell floods or exhausts.
GATE_GROWTH_MB = 256
CGROUPS = Path("/sys/fs/cgroup")


def cgroup_folders(sandbox_id: str) -> tuple[Path, Path]:
    """The sandbox's memory and pids cgroup folders (runsc puts each sandbox in /cellgate/<id>; v1 or v2)."""
    v1 = (CGROUPS / "memory" / "cellgate" / sandbox_id, CGROUPS / "pids" / "cellgate" / sandbox_id)
    if v1[0].is_dir():
        return v1
    return CGROUPS / "cellgate" / sandbox_id, CGROUPS / "cellgate" / sandbox_id


def read_int(folder: Path, *names: str) -> int | None:
    for name in names:
        try:
            return int((folder / name).read_text().strip())
        except (OSError, ValueError):
            continue
    return None  # the sandbox's cgroup goes when the sandbox dies


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class SandboxWatch:
    """Samples, until stopped, the sandbox's own cgroup and this process's resident memory."""

    def __init__(self, sandbox_id: str) -> None:
        self.memory, self.pids = cgroup_folders(sandbox_id)
        self.memory_limit = read_int(self.memory, "memory.limit_in_bytes", "memory.max")
        self.pids_limit = read_int(self.pids, "pids.max")
        assert self.memory_limit and self.pids_limit, f"no memory or pids cgroup for sandbox {sandbox_id}"
        self.most_memory = self.most_procs = 0
        self.before_rss = self.most_rss = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample_once(self) -> None:
        self.most_memory = max(self.most_memory, read_int(self.memory, "memory.max_usage_in_bytes", "memory.peak",
                                                          "memory.usage_in_bytes", "memory.current") or 0)
        try:
            procs = len((self.pids / "cgroup.procs").read_text().split())
        except OSError:
            procs = 0
        self.most_procs = max(self.most_procs, procs)
        self.most_rss = max(self.most_rss, rss_mb())

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self._sample_once()

    def __enter__(self) -> SandboxWatch:
        self._sample_once()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sample_once()


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
                         ("memory",), "SandboxMemoryLimit"),
    # Small stacks, so that the pids limit ends it far from the address-space cap: with the default 2 MiB stacks the
    # two tied at these limits, and at the address-space edge a new thread's stack fits but its first frame does
    # not, so it dies (SystemError) and the loop starting the next one never ended (one CI run).
    "thread bomb": Case("import threading, time\nthreading.stack_size(1 << 18)\nwhile True:\n"
                        "    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()",
                        ("error",), "RuntimeError: can't start new thread"),
    "X5 regex backtracking holding the GIL": Case("import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')",
                                                  ("killed",), limit="timeout"),
    # The loop writes faster than the kernel's stdout buffer drains: the kernel's own memory cap ends it with a
    # MemoryError (the kernel survives) after the host's output cap took effect.
    # Under CPU load the kernel sometimes dies instead (exit 139: a C extension's failed allocation at the
    # address-space cap, seen in 3 of 4 loaded runs after issue 31's kernel additions): contained all the same, the
    # output limit hit, the written output recovered from the kernel's log, and the session usable after a restart.
    "X6 output flood": Case("while True:\n    print('A' * 65536)", ("error", "kernel-died"), "MemoryError",
                            limit="output"),
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
    with SandboxWatch(box.session.provisioner.handle.id) as watch:
        result = box.execute(case.program)
    assert result.status in case.statuses, (result.status, result.error, result.limits_hit)
    if case.error and result.status != "kernel-died":  # a dead kernel reports no error of its own
        assert result.error is not None
        assert case.error in f"{result.error['ename']}: {result.error['evalue']}", result.error
    if case.limit:
        assert case.limit in result.limits_hit, result.limits_hit
    # The sandbox's own cgroup carries the configured limits and stayed within them; the gate's process did not
    # take the load (its output cap and bounds held).
    assert (watch.memory_limit, watch.pids_limit) == (MEMORY_MB << 20, PIDS), vars(watch)
    # (The cgroup's high-water mark can pass its limit by the pages in flight when the limit hit: 1 MiB slack.)
    assert 0 < watch.most_memory <= watch.memory_limit + (1 << 20) and 0 < watch.most_procs <= PIDS, vars(watch)
    assert watch.most_rss - watch.before_rss <= GATE_GROWTH_MB, vars(watch)
    # The session: the same kernel with its variables when it survived, a fresh one when it was killed
    # (restarted by the session itself after the memory backstop).
    if result.status == "memory":
        assert not box.session.dead
        assert box.execute("print('fresh', 'marker' in globals())").stdout == "fresh False\n"
    elif result.status in ("killed", "kernel-died"):
        assert box.session.dead
        box.restart()
        assert box.execute("print('fresh', 'marker' in globals())").stdout == "fresh False\n"
    else:
        assert box.execute("print(marker)").stdout == "kept\n"
