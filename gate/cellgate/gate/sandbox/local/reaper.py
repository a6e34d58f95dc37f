"""Deletes one sandbox when its host process goes away, however it goes.

Started by ``Sandbox.start`` with a pipe on stdin. The host writes ``done``
after it deleted the sandbox itself; end-of-file without it means the host
died, and the reaper deletes the sandbox and its run folder.

It runs as a script (``python -P reaper.py``), not as ``-m cellgate.gate.sandbox.local.reaper``,
and imports the package only once it has work to do: one waits beside every
sandbox, and importing the whole gate would make each of them cost ~40 MB.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    folder = Path(sys.argv[1])
    if sys.stdin.buffer.read().strip() == b"done":
        return
    from cellgate.gate.sandbox.local.container import reap_leftovers

    # The host is gone: its owner record is stale, so the sandbox is a leftover.
    reap_leftovers(folder.parent)


if __name__ == "__main__":
    main()
