"""Deletes a host process's sandboxes when the process goes away, however it goes.

One reaper waits beside each host process that runs sandboxes (per run root), not one per sandbox: it was a
Python process of ~9 MB beside every sandbox, a tenth of an idle session's memory. ``watch`` starts it with a
pipe on its stdin that only the host holds; end-of-file means the host is gone (exited or killed). The reaper then
waits until the host's process has ended and deletes every sandbox under the run root whose owner is gone
(``leftovers.reap_leftovers``): whatever the host deleted itself is no longer there, so a clean exit costs a scan.

It runs as a script (``python -P reaper.py``), not as ``-m cellgate.gate.sandbox.local.reaper``, and imports the
package only once it has work to do: importing the whole gate would make it cost ~40 MB while it waits.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

OWNER_EXIT_WAIT = 10.0  # seconds the reaper waits for its host's process to end after its pipe closed


@dataclass
class _Reaper:
    """A started reaper: its process and the write end of its stdin pipe, which only this process holds."""

    pid: int
    pipe: int
    owner_pid: int  # the process that started it (a forked child has the table but not the reaper)

    def running(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False


_started: dict[Path, _Reaper] = {}
_lock = threading.Lock()


def watch(run_root: Path, host_path: str) -> None:
    """Make sure a reaper waits for this process for the sandboxes under ``run_root`` (started once per root).

    Spawned with ``os.posix_spawn`` rather than ``subprocess.Popen``: it is meant to outlive the process, and a
    Popen still running when the interpreter ends warns ("subprocess N is still running", its stdin unclosed)."""
    with _lock:
        reaper = _started.get(run_root)
        if reaper is not None and reaper.owner_pid == os.getpid() and reaper.running():
            return
        read_end, write_end = os.pipe()  # both non-inheritable; the reaper gets the read end as its stdin
        try:
            pid = os.posix_spawn(
                sys.executable, [sys.executable, "-P", __file__, str(run_root), str(os.getpid())],
                {"PATH": host_path, "PYTHONPATH": os.pathsep.join(sys.path)},
                file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0),
                              (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                              (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)],
                setsid=True,
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        _started[run_root] = _Reaper(pid, write_end, os.getpid())


def _wait_for_exit(pid: int) -> None:
    """Wait (bounded) until process ``pid`` has ended: its pipe closes a moment before it is gone."""
    deadline = time.monotonic() + OWNER_EXIT_WAIT
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except (OSError, IndexError):
            return
        time.sleep(0.05)


def main() -> None:
    root, owner = Path(sys.argv[1]), int(sys.argv[2])
    sys.stdin.buffer.read()  # returns at end-of-file: the host is gone
    _wait_for_exit(owner)
    from cellgate.gate.sandbox.local.leftovers import reap_leftovers

    reap_leftovers(root)  # the sandboxes whose owner is gone: the host's own, if it left any


if __name__ == "__main__":
    main()
