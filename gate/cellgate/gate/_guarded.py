"""The one way the host touches a folder something else can write.

The sandbox writes its socket folder (a cell can plant a symlink, a FIFO, a
folder or a hard link at any name there), a person hands the CLI folders, and
an image store or a run folder may have been tampered with. A path-following
call (``write_text``, ``open``, ``chown``, ``exists``, ``rmtree`` of a
symlink) in such a folder lets whoever planted the name steer the host, which
runs as root: overwrite a file, give it away, block on a FIFO. So every
operation here is relative to a descriptor of the folder, opened with
``O_NOFOLLOW | O_NONBLOCK`` (``O_CREAT | O_EXCL`` for new files), checked
with ``fstat``, changed with ``fchown``/``fchmod`` on the descriptor, removed
with ``unlinkat``/``renameat``. SECURITY.md lists the folders and their guards.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from types import TracebackType

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafePath(OSError):
    """A name in a guarded folder is not what the host expects there (a link, a FIFO, a folder, a hard link)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return name
    return "a file"


class Folder:
    """An open folder: every name in it is reached through its descriptor, never through a path."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path  # for messages only

    @classmethod
    def open(cls, path: str | Path) -> Folder:
        """Open ``path`` itself as a folder; a symlink there is refused (``UnsafePath``)."""
        try:
            return cls(os.open(path, _FOLDER), str(path))
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePath(exc.errno, f"{path} is not a folder (a link or a file); refusing to use it") from None
            raise

    def child(self, name: str) -> Folder:
        try:
            return Folder(os.open(name, _FOLDER, dir_fd=self.fd), os.path.join(self.path, name))
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePath(exc.errno, f"{self._name(name)} is not a folder; refusing to use it") from None
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _name(self, name: str) -> str:
        return os.path.join(self.path, name)

    # -- looking
    def lstat(self, name: str) -> os.stat_result | None:
        """What is at ``name`` itself (a link is a link), or None if nothing is."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def has_file(self, name: str) -> bool:
        """Whether ``name`` is a regular file with no other name (a hard link to elsewhere is not one)."""
        info = self.lstat(name)
        return info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink == 1

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    # -- reading and writing
    def open_file(self, name: str) -> int:
        """A descriptor for reading regular file ``name``: a link, FIFO or folder there is ``UnsafePath``, and opening
        never blocks (``O_NONBLOCK``: a FIFO with no writer would hold the host's thread)."""
        try:
            fd = os.open(name, _READ, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(exc.errno, f"{self._name(name)} is a symlink; refusing to read it") from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            what = _kind(info.st_mode) if not stat.S_ISREG(info.st_mode) else "a file with another name (a hard link)"
            raise UnsafePath(errno.EINVAL, f"{self._name(name)} is {what}, not a file; refusing to read it")
        os.set_blocking(fd, True)
        return fd

    def read(self, name: str, limit: int) -> bytes:
        """Up to ``limit`` bytes of regular file ``name``."""
        fd = self.open_file(name)
        try:
            return os.read(fd, limit)
        finally:
            os.close(fd)

    def write_new(self, name: str, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] | None = None) -> None:
        """Create ``name`` (it must not exist: ``FileExistsError``), owned and moded through its descriptor."""
        fd = os.open(name, _NEW, mode, dir_fd=self.fd)
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)
            os.write(fd, data)
        except BaseException:
            os.close(fd)
            self.remove(name)
            raise
        os.close(fd)

    def rename(self, name: str, new_name: str) -> None:
        os.rename(name, new_name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def remove(self, name: str) -> None:
        """Remove whatever is at ``name`` (a folder with all it holds, a link itself, never what it points to)."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            with self.child(name) as inner:
                inner._empty()
            os.rmdir(name, dir_fd=self.fd)

    def _empty(self) -> None:
        """Remove everything inside, making read-only folders writable first (through their descriptors)."""
        os.fchmod(self.fd, 0o700)
        for name in self.names():
            self.remove(name)


def remove_tree(path: str | Path) -> None:
    """Remove folder ``path`` and everything in it, read-only folders too; a symlink at ``path`` is removed itself
    and nothing it points to is touched."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    with Folder.open(parent) as folder:
        folder.remove(name)


def remove_tree_quietly(path: str | Path) -> None:
    """``remove_tree`` for cleanup: what cannot be removed is left (a leftover is reaped later, never followed)."""
    try:
        remove_tree(path)
    except OSError:
        pass
