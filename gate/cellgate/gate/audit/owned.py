"""Opening the files and folders a run writes (its journal, its blob folder): the one way, for all of them.

A run's folder may sit where other local users can create names (a shared
project folder, /tmp). One of them can make ``<run>.journal.jsonl`` or
``<run>.blobs`` first: as a file or folder of theirs, one they can write to,
or a symlink to one. So each is opened with ``O_NOFOLLOW`` (a link is refused,
never followed) and checked on the opened descriptor, not the name (``fstat``:
no rename can slip in between): only a regular file or a folder of this user,
that no one else may write to, is used. What cellgate creates is this user's
alone: files 0600, folders 0700, and a run folder's missing parents 0700 too
(a run's name, time and result digests are nobody else's to list).

Everything wrong is a ``JournalError`` naming the path, what is wrong with it
and what to do: the record cannot be written, and the gate fails closed.
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path

from cellgate.gate._errors import JournalError

_ELSEWHERE = "record to a notebook in a folder of your own"


def make_folders(path: Path) -> None:
    """``path`` and every missing folder above it, each created 0700; folders already there are left as they are."""
    missing = []
    folder = Path(os.path.abspath(path))
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass  # made meanwhile: whatever is there is checked where it is opened
        except OSError as exc:
            raise JournalError(f"cannot create the folder {folder}: {exc.strerror}; {_ELSEWHERE}") from None


def open_owned(path: Path, flags: int, what: str, mode: int = 0o600) -> int:
    """An fd of ``path`` (``flags``: ``os.O_*``; created ``mode`` with ``O_CREAT``), never through a symlink,
    refused unless it is this user's regular file (or folder, with ``O_DIRECTORY``) that no one else may write."""
    folder = bool(flags & os.O_DIRECTORY)
    try:  # O_NONBLOCK: a planted FIFO fails the open instead of blocking it
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if folder else os.O_NONBLOCK), mode)
    except OSError as exc:
        raise JournalError(f"{what} {path} {_unopenable(path, exc)}") from None
    problem = _not_owned(os.fstat(fd), folder, path)
    if problem:
        os.close(fd)
        raise JournalError(f"{what} {path} {problem}")
    if not folder:
        os.set_blocking(fd, True)
    return fd


def owned_folder(path: Path, what: str) -> int:
    """An fd of the folder ``path``, created 0700 if missing, checked as :func:`open_owned` checks."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # this user's from an earlier call, or planted: the open below tells
    except OSError as exc:
        raise JournalError(f"{what} {path} cannot be created: {exc.strerror}; {_ELSEWHERE}") from None
    return open_owned(path, os.O_RDONLY | os.O_DIRECTORY, what)


def _unopenable(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP or os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return (f"is a symbolic link (to {target!r}); a record is never written through one: remove the link, or "
                f"{_ELSEWHERE}")
    if exc.errno == errno.ENOTDIR:
        return f"is not a folder; remove it, or {_ELSEWHERE}"
    return f"cannot be opened ({exc.strerror}); it must be a regular file or folder of yours, or {_ELSEWHERE}"


def _not_owned(info: os.stat_result, folder: bool, path: Path) -> str | None:
    """Why an opened file or folder is not this user's alone to write, or None."""
    if info.st_uid != os.geteuid():
        return (f"belongs to {_owner(info.st_uid)}, not to you (uid {os.geteuid()}): another user created it "
                f"first; nothing of yours is written there. Ask them or root to remove it, or {_ELSEWHERE}")
    if not folder and not stat.S_ISREG(info.st_mode):
        return f"is not a regular file; remove it, or {_ELSEWHERE}"
    if stat.S_IMODE(info.st_mode) & 0o022:
        return (f"may be written by others (mode {stat.S_IMODE(info.st_mode):o}): they could have put or changed "
                f"anything in it. If only you ever wrote to it, run `chmod go-w {path}`, else remove it")
    return None


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


__all__ = ["make_folders", "open_owned", "owned_folder"]
