"""Per-user runtime folders (run folders, snapshot images, approvals, launcher state): this user's alone.

A folder is created 0700 (missing parents too) and, whether just created or found, used only if it is a real
folder (not a link), owned by this user, with no group or other bits, and every folder above it belongs to
this user or root and is writable by no one else unless sticky (as /tmp is). So another local user can neither
read what is inside nor plant a folder, a link or files where this user's state goes: a folder they created
first is refused with an error naming it and its owner, never used.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from cellgate.gate._errors import ConfigError


def run_root() -> Path:
    """Where run folders live: /run/cellgate as root, else ``$XDG_RUNTIME_DIR/cellgate``
    (without one: /tmp/cellgate-UID/cellgate, checked by :func:`private_dir` like any other)."""
    base = os.environ.get("CELLGATE_RUN_ROOT")
    if base:
        return Path(base)
    if os.geteuid() == 0:
        return Path("/run/cellgate")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/cellgate-{os.geteuid()}"
    return Path(runtime) / "cellgate"


def private_dir(path: Path) -> Path:
    """``path`` as a folder of this user's alone: created 0700 with any missing parents, then checked
    (:func:`check_private`); ConfigError if it, or a parent it made or found, is not."""
    path = Path(os.path.abspath(path))
    missing = []
    folder = path
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    if missing:
        _check_above(path, folder)  # before anything is made in it
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass  # made meanwhile, by us or not: checked below like the rest
        except OSError as exc:
            raise ConfigError(f"cannot create the folder {folder}: {exc.strerror}. {_FIX}") from None
    for folder in missing[1:]:
        _check_folder(folder)
    check_private(path)
    return path


def check_private(path: Path) -> None:
    """ConfigError unless ``path`` is a folder of this user's alone, in folders no one else can change."""
    path = Path(os.path.abspath(path))
    _check_folder(path)
    _check_above(path, path.parent)


def _check_above(path: Path, folder: Path) -> None:
    """``folder`` (holding ``path``) and every folder above it belong to this user or root, and no one else may
    write to them unless they are sticky (as /tmp is): else another user could rename ``path`` and put their own
    in its place."""
    for parent in (folder, *folder.parents):
        try:
            link, info = os.lstat(parent), os.stat(parent)  # a link, and where it leads
        except OSError as exc:
            raise ConfigError(f"cannot check the folder {parent} above {path}: {exc.strerror}") from None
        strangers = {link.st_uid, info.st_uid} - {0, os.geteuid()}
        if strangers:
            raise ConfigError(f"{path} is inside {parent}, which belongs to {_owner(min(strangers))}, not to you "
                              f"(uid {os.geteuid()}) or root: they could replace it. {_FIX}")
        if stat.S_IMODE(info.st_mode) & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise ConfigError(f"{path} is inside {parent}, which others may write to (mode "
                              f"{stat.S_IMODE(info.st_mode):o}, not sticky): they could replace it. {_FIX}")


_FIX = ("Set $XDG_RUNTIME_DIR (or $CELLGATE_RUN_ROOT, $CELLGATE_APPROVALS_DIR, $JUPYTER_RUNTIME_DIR for that "
        "folder) to a folder of your own, mode 0700")


def _check_folder(path: Path) -> None:
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise ConfigError(f"cannot check the folder {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(f"{path} is a symbolic link (to {os.readlink(path)!r}), not a folder; cellgate keeps "
                          f"its state only in a real folder of yours. Remove the link. {_FIX}")
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{path} is not a folder; remove it. {_FIX}")
    if info.st_uid != os.geteuid():
        raise ConfigError(f"{path} belongs to {_owner(info.st_uid)}, not to you (uid {os.geteuid()}): another "
                          f"user created it first, and nothing of yours goes there. Ask them or root to remove "
                          f"it. {_FIX}")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ConfigError(f"{path} is open to others (mode {stat.S_IMODE(info.st_mode):o}); if only you ever "
                          f"wrote to it, run `chmod 700 {path}`, else remove it")


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


__all__ = ["check_private", "private_dir", "run_root"]
