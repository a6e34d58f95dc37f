"""Sessions of ``cellgate mcp serve`` kept as checkpoints: paused when idle (``[mcp] idle_pause``) or when the
server stops (``[mcp] pause_on_stop``), resumed by the next call with their handle, in this server process or a
later one.

The server's state folder (``[mcp] state_dir``, by default ``mcp-serve`` in ``[audit] dir``) is this user's
alone (0700, checked whether made or found)::

    parked.json    handle -> {checkpoint, owner, used, calls} of every paused session (0600)
    parked.lock    held (flock) while parked.json is read and rewritten: servers may share the folder
    checkpoints/   one folder per paused session (``Session.checkpoint``), removed once resumed, closed or expired

``parked.json`` is read as untrusted input: at most ``MAX_BYTES``, parsed by a strict model (a handle as the
server mints them, a checkpoint as a folder *name* of ``checkpoints/``, never a path), and nothing in it is run
or imported; the checkpoint it names is verified by ``Session.resume`` (the host key's MAC, every image file's
digest) before a byte of it is restored. A handle is taken out of the file by the one server that resumes it,
and only for its owner (the principal in the entry): anyone else is told what an unknown handle gets.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from cellgate.gate import ConfigError
from cellgate.gate.ext import StrictModel

from .auth import Principal

FILE = "parked.json"
LOCK = "parked.lock"
CHECKPOINTS = "checkpoints"
MAX_BYTES = 4 << 20  # ~20,000 entries: far past what --max-sessions and the quotas let accumulate
ORPHAN_AGE = 3600.0  # seconds: a checkpoint folder no entry names is removed after this (a server may be making it)
HANDLE = r"^[A-Za-z0-9_-]{22}$"  # secrets.token_urlsafe(16)
CHECKPOINT_NAME = re.compile(r"^[0-9a-f]{32}$")


class Owner(StrictModel):
    name: str = Field(min_length=1, max_length=1000)
    issuer: str = Field(min_length=1, max_length=2000)


class Parked(StrictModel):
    """One paused session: its checkpoint folder (a name in ``checkpoints/``), owner, last use, calls made."""

    checkpoint: str = Field(pattern=CHECKPOINT_NAME.pattern)
    owner: Owner | None
    used: float = Field(description="wall-clock time of its last call (it expires idle_timeout seconds later)")
    calls: int = Field(ge=0)

    def owned_by(self, principal: Principal | None) -> bool:
        mine = None if principal is None else Owner(name=principal.name, issuer=principal.issuer)
        return self.owner == mine


class ParkedFile(StrictModel):
    format: Literal[1] = 1
    sessions: dict[str, Parked] = Field(default_factory=dict)


def private_folder(path: Path) -> Path:
    """``path`` made (0700, parents as needed) or found, and used only if it is a folder of this user's alone."""
    path = Path(os.path.abspath(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise ConfigError(f"the state folder of cellgate mcp serve, {path}, cannot be made: {exc.strerror or exc}; "
                          "set [mcp] state_dir to a folder you may write") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise ConfigError(f"{path} (the state folder of cellgate mcp serve) is not a folder of this user's alone "
                          f"(mode {stat.filemode(info.st_mode)}, owner uid {info.st_uid}): it would hold the paused "
                          "sessions' memory; remove it, or set [mcp] state_dir to another folder")
    return path


class Parking:
    """The state folder's paused sessions (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = private_folder(folder)
        self.checkpoints = private_folder(self.folder / CHECKPOINTS)
        self.file = self.folder / FILE

    def new_checkpoint(self) -> Path:
        """A path for a new checkpoint folder (``Session.checkpoint`` and ``fork`` make it, 0700)."""
        return self.checkpoints / secrets.token_hex(16)

    def checkpoint_of(self, parked: Parked) -> Path:
        return self.checkpoints / parked.checkpoint

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Parked]]:
        """The parked sessions, read under the folder's lock and written back (atomically) when the block ends."""
        fd = os.open(self.folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            sessions = self._read()
            before = dict(sessions)
            yield sessions
            if sessions != before:
                self._write(sessions)
        finally:
            os.close(fd)  # releases the lock

    def _read(self) -> dict[str, Parked]:
        try:
            fd = os.open(self.file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"{self.file} cannot be read ({exc.strerror or exc}); remove it (its paused sessions "
                              "are then gone)") from None
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size > MAX_BYTES:
                raise ConfigError(f"{self.file} is not a file of this user's of at most {MAX_BYTES:,} bytes; it was "
                                  "not written by cellgate mcp serve: remove it")
            raw = file.read(MAX_BYTES + 1)
        try:
            parsed = ParkedFile.model_validate_json(raw)
        except ValidationError as exc:
            raise ConfigError(f"{self.file} is not a list of paused sessions cellgate wrote "
                              f"({exc.error_count()} problems, the first: {exc.errors()[0]['msg']}); remove it "
                              "(its paused sessions are then gone)") from None
        return {handle: parked for handle, parked in parsed.sessions.items() if re.match(HANDLE, handle)}

    def _write(self, sessions: dict[str, Parked]) -> None:
        text = ParkedFile(sessions=sessions).model_dump_json(indent=1)
        temporary = self.folder / f".{FILE}.{secrets.token_hex(4)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.file)

    def park(self, handle: str, parked: Parked) -> None:
        with self._locked() as sessions:
            sessions[handle] = parked

    def take(self, handle: str, owner: Principal | None) -> Parked | None:
        """The paused session ``handle`` of ``owner``, out of the file (this server resumes it), or None."""
        with self._locked() as sessions:
            parked = sessions.get(handle)
            if parked is None or not parked.owned_by(owner):
                return None
            del sessions[handle]
            return parked

    def count(self, owner: Principal | None) -> int:
        """How many paused sessions ``owner`` has here."""
        with self._locked() as sessions:
            return sum(1 for parked in sessions.values() if parked.owned_by(owner))

    def discard(self, parked: Parked) -> None:
        shutil.rmtree(self.checkpoint_of(parked), ignore_errors=True)

    def expire(self, idle_timeout: float) -> int:
        """Drop the paused sessions unused for ``idle_timeout`` seconds (their checkpoints too), and checkpoint
        folders no entry has named for ``ORPHAN_AGE``; how many sessions expired."""
        now = time.time()
        with self._locked() as sessions:
            expired = [handle for handle, parked in sessions.items() if now - parked.used > idle_timeout]
            for handle in expired:
                self.discard(sessions.pop(handle))
            named = {parked.checkpoint for parked in sessions.values()}
            for folder in os.scandir(self.checkpoints):
                stale = now - folder.stat(follow_symlinks=False).st_mtime > ORPHAN_AGE
                if folder.name not in named and stale:
                    shutil.rmtree(folder.path, ignore_errors=True)
        return len(expired)


__all__ = ["Parked", "Parking", "private_folder"]
