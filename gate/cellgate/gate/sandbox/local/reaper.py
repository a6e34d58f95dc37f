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
import subprocess
import sys
import threading
import time
from pathlib import Path

OWNER_EXIT_WAIT = 10.0  # seconds the reaper waits for its host's process to end after its pipe closed

_started: dict[Path, subprocess.Popen[bytes]] = {}
_lock = threading.Lock()


def watch(run_root: Path, host_path: str) -> None:
    """Make sure a reaper waits for this process for the sandboxes under ``run_root`` (started once per root)."""
    with _lock:
        reaper = _started.get(run_root)
        # A forked child has its parent's table but not its reaper: the pid tells them apart.
        if reaper is not None and reaper.poll() is None and getattr(reaper, "owner_pid", None) == os.getpid():
            return
        reaper = subprocess.Popen(
            [sys.executable, "-P", __file__, str(run_root), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env={"PATH": host_path, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        reaper.owner_pid = os.getpid()  # type: ignore[attr-defined]
        _started[run_root] = reaper


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
