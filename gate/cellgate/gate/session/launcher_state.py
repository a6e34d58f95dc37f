"""Which audit notebook a frontend's kernel records to, kept across the launcher processes of one kernel.

A frontend restarts a kernel by ending its process and starting a new one on
the same connection file; the new launcher finds the record to continue here.
One small JSON file per connection file (named by a digest of its path), in
``cellgate/`` under the Jupyter runtime folder: the folder 0700 and the file
0600, both owned by this user. Anything else there (another owner, wider
modes, a link, a file too large or not of this shape) is not trusted: the
launcher then starts a new record and says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from jupyter_core.paths import jupyter_runtime_dir

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import write_atomically
from cellgate.gate.sandbox.runtime_dir import check_private, private_dir

# How a launcher's kernel ended: the next launcher on the same connection file continues the record
# unless it was a full shutdown (then the state file is removed).
Ending = Literal["restart", "kernel-died", "kernel-killed", "stopped"]
MAX_STATE_BYTES = 16 << 10


class UntrustedState(Exception):
    """The state file or its folder is not this user's alone; its content is not used."""


@dataclass(frozen=True)
class LaunchState:
    connection_file: str
    notebook: str
    ended: Ending | None  # None while a launcher serves the kernel (or when it died without saying)


def state_folder() -> Path:
    return Path(jupyter_runtime_dir()) / "cellgate"


def state_path(connection_file: Path, folder: Path | None = None) -> Path:
    name = hashlib.sha256(str(connection_file.resolve()).encode()).hexdigest()[:32]
    return (folder or state_folder()) / f"launch-{name}.json"


def _private(info: os.stat_result, what: str, mode: int) -> None:
    if info.st_uid != os.geteuid():
        raise UntrustedState(f"{what} belongs to uid {info.st_uid}, not to this user ({os.geteuid()})")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise UntrustedState(f"{what} has mode {stat.S_IMODE(info.st_mode):o}; only its owner may use it "
                             f"(expected {mode:o})")


def _folder(path: Path, create: bool) -> None:
    """The state's folder, created 0700 if ``create``; UntrustedState unless it is this user's alone."""
    if not create and not os.path.lexists(path.parent):
        raise FileNotFoundError(path.parent)  # no state yet
    try:
        if create:
            private_dir(path.parent)
        else:
            check_private(path.parent)
    except ConfigError as exc:
        raise UntrustedState(str(exc)) from None


def load(path: Path) -> LaunchState | None:
    """The state at ``path``; None if there is none; UntrustedState if it cannot be trusted."""
    try:
        _folder(path, create=False)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UntrustedState(f"{path} cannot be opened: {exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedState(f"{path} is not a regular file")
        _private(info, str(path), 0o600)
        raw = handle.read(MAX_STATE_BYTES + 1)
    try:
        data = json.loads(raw) if len(raw) <= MAX_STATE_BYTES else None
    except ValueError:
        data = None
    if not (isinstance(data, dict) and isinstance(data.get("connection_file"), str)
            and isinstance(data.get("notebook"), str) and data.get("ended") in (None, *get_args(Ending))):
        raise UntrustedState(f"{path} is not a cellgate launch state")
    return LaunchState(data["connection_file"], data["notebook"], data["ended"])


def recording(connection_file: Path) -> LaunchState | None:
    """Which audit notebook the launcher serving ``connection_file`` records to, from the state it saved on this
    host (never from the kernel); None until the launcher has saved it; UntrustedState if it cannot be trusted.

    For a frontend's server (the JupyterLab extension), which knows its kernels' connection files: ``ended``
    is None while a launcher serves the kernel.
    """
    state = load(state_path(connection_file))
    return state if state is not None and state.connection_file == str(connection_file.resolve()) else None


def save(path: Path, state: LaunchState) -> None:
    _folder(path, create=True)
    write_atomically(path, json.dumps({"connection_file": state.connection_file, "notebook": state.notebook,
                                       "ended": state.ended}), durable=False)  # mkstemp: mode 0600


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def prune(folder: Path) -> None:
    """Forget kernels whose connection file is gone (the frontend removed it): their records cannot continue."""
    for path in folder.glob("launch-*.json"):
        try:
            state = load(path)
        except UntrustedState:
            continue  # not ours to judge or remove
        if state is not None and not Path(state.connection_file).exists():
            remove(path)


__all__ = ["Ending", "LaunchState", "UntrustedState", "load", "prune", "recording", "remove", "save", "state_folder",
           "state_path"]
