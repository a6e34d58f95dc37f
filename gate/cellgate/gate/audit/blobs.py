"""Result blobs: a call's result too large to inline in the journal, stored once by its sha256 beside the run;
and the bytes of each file a session moved in or out of the sandbox (``<sha256>.bin``).

The folder ``<run>.blobs`` is opened as the journal is (``owned``): never through a symlink, only a folder of
this user's that no one else may write to, created 0700; each blob is written through that open folder, so a
name swapped in after the check leads nowhere else.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cellgate.gate._json import write_atomically
from cellgate.gate.audit.owned import owned_folder

WHAT = "the result blobs' folder"


def blobs_path(notebook: Path) -> Path:
    return notebook.with_name(notebook.stem + ".blobs")


class BlobStore:
    """``<run>.blobs/<sha256>.json``, each the canonical JSON of one result (``cellgate verify`` checks them).

    The folder is made with the first blob (a run without a large result has none); one found already there
    (planted, or a resumed run's) is checked when the store is made, so a bad one stops the session's start.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd: int | None = None
        self._lock = threading.Lock()
        if os.path.lexists(folder):
            self._open()

    def _open(self) -> int:
        with self._lock:
            if self._fd is None:
                self._fd = owned_folder(self.folder, WHAT)
            return self._fd

    def store(self, digest: str, text: str) -> str:
        """Write a value's canonical JSON ``text`` under ``digest`` unless it is there; returns its name relative
        to the run's folder."""
        folder = self._open()
        name = f"{digest}.json"
        try:
            os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            write_atomically(self.folder / name, text, folder_fd=folder)
        return f"{self.folder.name}/{name}"

    def store_bytes(self, digest: str, data: bytes) -> str:
        """A file's bytes (``Session.upload`` / ``download``) as ``<sha256>.bin``, written whole or not at all,
        durably (the journal record naming it follows); returns its name relative to the run's folder."""
        folder = self._open()
        name = f"{digest}.bin"
        try:
            os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            temp = f".{name}.{os.urandom(6).hex()}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=folder)
                except FileNotFoundError:
                    pass
                raise
            os.fsync(folder)
        return f"{self.folder.name}/{name}"

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


__all__ = ["BlobStore", "blobs_path"]
