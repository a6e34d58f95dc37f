"""Which audit notebook a live kernel of this server records to, from host state only.

A cellgate kernel is one whose kernelspec runs the cellgate launcher (``python -m cellgate.gate.session.launcher``);
the launcher, a host process, saves which notebook it records to in its private state file, keyed by the
connection file this server gave it (``cellgate.gate.ext.kernel_recording``). Nothing the kernel says (its replies,
outputs or the notebook's metadata) is asked: a sandboxed kernel could name any path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from cellgate.gate.ext import KERNEL_LAUNCHER_MODULE, UntrustedLaunchState, kernel_recording


class Verification(Protocol):
    """What ``cellgate.gate.ext.verify_run`` returns, as far as the reply reads it."""

    problems: list[str]
    unended: str | None
    records: int
    blobs: int
    key_id: str | None

    @property
    def ok(self) -> bool: ...


def is_cellgate(argv: Sequence[str]) -> bool:
    """Whether a kernelspec's argv starts the cellgate launcher."""
    return any(a == "-m" and b == KERNEL_LAUNCHER_MODULE for a, b in zip(argv, argv[1:], strict=False))


def under_root(path: Path, root: Path) -> str | None:
    """``path`` relative to the server's root (symlinks resolved) when it is a file under it; else None."""
    try:
        resolved = path.resolve(strict=True)
        base = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_file() or not resolved.is_relative_to(base):
        return None
    return resolved.relative_to(base).as_posix()


def live_run(argv: Sequence[str], connection_file: str | None, root: Path) -> dict[str, Any]:
    """What the run panel shows of a live kernel: whether it is cellgate's, and if so its audit notebook.

    ``state``: ``starting`` (no notebook saved yet), ``running`` (a launcher serves the kernel and records to
    ``notebook``), ``restarting`` (the last launcher ended as ``ended`` says; the next one continues or names its
    record) or ``unknown`` (the state file cannot be trusted; ``problem`` says why). ``path`` is the notebook
    relative to the server's root, for a link, or None when it is outside it.
    """
    if not is_cellgate(argv):
        return {"cellgate": False}
    if not connection_file:
        return {"cellgate": True, "state": "starting", "notebook": None, "path": None, "ended": None,
                "problem": None}
    try:
        state = kernel_recording(Path(connection_file))
    except UntrustedLaunchState as exc:
        return {"cellgate": True, "state": "unknown", "notebook": None, "path": None, "ended": None,
                "problem": f"the launcher's state cannot be trusted ({exc}); its audit notebook is not known here"}
    except OSError as exc:
        return {"cellgate": True, "state": "unknown", "notebook": None, "path": None, "ended": None,
                "problem": f"the launcher's state cannot be read: {exc}"}
    if state is None:
        return {"cellgate": True, "state": "starting", "notebook": None, "path": None, "ended": None,
                "problem": None}
    notebook = Path(state.notebook)  # the launcher saves it resolved; anything else is shown, never linked
    return {"cellgate": True, "state": "running" if state.ended is None else "restarting",
            "notebook": str(notebook), "path": under_root(notebook, root) if notebook.is_absolute() else None,
            "ended": state.ended, "problem": None}


def verify_reply(result: Verification, recorded_live: bool) -> dict[str, Any]:
    """The verify endpoint's answer. A run a live kernel of this server still records (``recorded_live``, from
    host state) has not ended its journal: that alone is no problem yet, and the page says "still running";
    every other problem stands."""
    running = recorded_live and result.unended is not None
    problems = [p for p in result.problems if p != result.unended] if running else list(result.problems)
    return {"ok": result.ok, "running": running, "problems": problems, "records": result.records,
            "blobs": result.blobs, "key_id": result.key_id}
