"""Sessions of ``cellgate mcp serve`` kept as checkpoints: paused when idle (``[mcp] idle_pause``) or when the
server stops (``[mcp] pause_on_stop``), resumed by the next call with their handle, in this server process or a
later one.

The server's state folder (``[mcp] state_dir``, by default ``mcp-serve`` in ``[audit] dir``) is this user's
alone (0700, checked whether made or found)::

    parked.json    {format, sessions, mac}: handle -> {checkpoint, manifest, owner, used, calls} of every paused
                   session, under a MAC of this host's key (0600)
    parked.lock    held (flock) while parked.json is read and rewritten: servers may share the folder
    checkpoints/   one folder per paused session (``Session.checkpoint``), removed once resumed, closed or expired

``parked.json`` is read as untrusted input: opened without following a link or waiting on a FIFO, a regular file
of this user's of at most ``MAX_BYTES``, parsed by a strict model (a handle as the server mints them, a checkpoint
as a folder *name* of ``checkpoints/``, never a path), and used only if the host key's MAC covers all of it (every
entry's owner included: an edited file hands no session to another principal; it is refused, and the server with
it, with what to do). Nothing in it is run or imported. Each entry names the digest of its checkpoint's manifest,
and the checkpoint is verified by ``read_checkpoint`` (the host key's MAC, every image file's digest) and matched
against it before a byte of it is restored: a checkpoint folder swapped for another's is not resumed. A handle is
taken out of the file by the one server that resumes it, and only for its owner (the principal in the entry):
anyone else is told what an unknown handle gets.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field, ValidationError

from cellgate.gate import ConfigError
from cellgate.gate.ext import StrictModel, load_host_key

from .auth import Principal

FILE = "parked.json"
LOCK = "parked.lock"
CHECKPOINTS = "checkpoints"
MAX_BYTES = 4 << 20  # ~20,000 entries: far past what --max-sessions and the quotas let accumulate
ORPHAN_AGE = 3600.0  # seconds: a checkpoint folder no entry names is removed after this (a server may be making it)
HANDLE = r"^[A-Za-z0-9_-]{22}$"  # secrets.token_urlsafe(16)
CHECKPOINT_NAME = re.compile(r"^[0-9a-f]{32}$")
KINDS = {stat.S_IFDIR: "folder", stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "device",
         stat.S_IFBLK: "device", stat.S_IFLNK: "symbolic link"}
FORMAT = 2  # 1 (before issue 42) had no MAC: such a file is refused
MAC_PURPOSE = "cellgate-mcp-parked"


class Owner(StrictModel):
    name: str = Field(min_length=1, max_length=1000)
    issuer: str = Field(min_length=1, max_length=2000)


class Parked(StrictModel):
    """One paused session: its checkpoint folder (a name in ``checkpoints/``), owner, last use, calls made."""

    checkpoint: str = Field(pattern=CHECKPOINT_NAME.pattern)
    manifest: str = Field(pattern=r"^[0-9a-f]{64}$", description="the digest of the checkpoint's manifest")
    owner: Owner | None
    used: float = Field(description="wall-clock time of its last call (it expires idle_timeout seconds later)")
    calls: int = Field(ge=0)

    def owned_by(self, principal: Principal | None) -> bool:
        mine = None if principal is None else Owner(name=principal.name, issuer=principal.issuer)
        return self.owner == mine


class ParkedFile(StrictModel):
    format: int
    sessions: dict[str, Parked] = Field(default_factory=dict)
    mac: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # None: refused, with what a format-1 file gets


def signed(sessions: dict[str, Parked]) -> bytes:
    """What the MAC covers: the format and every entry, each field of it (canonical JSON)."""
    body = {"format": FORMAT, "sessions": {h: p.model_dump(mode="json") for h, p in sessions.items()}}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


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
        with self._locked():  # a parked.json the server cannot use refuses the server now, saying what to do
            pass

    def new_checkpoint(self) -> Path:
        """A path for a new checkpoint folder (``Session.checkpoint`` and ``fork`` make it, 0700)."""
        return self.checkpoints / secrets.token_hex(16)

    def checkpoint_of(self, parked: Parked) -> Path:
        return self.checkpoints / parked.checkpoint

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Parked]]:
        """The parked sessions, read under the folder's lock and written back (atomically) when the block ends."""
        lock = self.folder / LOCK
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise self._refused(lock, f"cannot be opened ({exc.strerror or exc}): it is not the lock file cellgate "
                                      "makes") from None
        try:
            self._check_file(lock, os.fstat(fd), 0)
            fcntl.flock(fd, fcntl.LOCK_EX)
            sessions = self._read()
            before = dict(sessions)
            yield sessions
            if sessions != before:
                self._write(sessions)
        finally:
            os.close(fd)  # releases the lock

    def _refused(self, path: Path, problem: str) -> ConfigError:
        return ConfigError(f"{path} {problem}; cellgate mcp serve keeps its paused sessions there and uses nothing "
                           "it did not write: remove it (the paused sessions it lists are then gone), or restore "
                           "the file the server wrote")

    def _check_file(self, path: Path, info: os.stat_result, most: int) -> None:
        """A regular file of this user's (of at most ``most`` bytes, when given), or refused."""
        if not stat.S_ISREG(info.st_mode):
            kind = KINDS.get(stat.S_IFMT(info.st_mode), "special file")
            raise self._refused(path, f"is a {kind}, not a regular file")
        if info.st_nlink != 1:
            raise self._refused(path, f"has {info.st_nlink} names (hard links); the server's file has one")
        if info.st_uid != os.geteuid():
            raise self._refused(path, f"belongs to uid {info.st_uid}, not to this server's (uid {os.geteuid()})")
        if most and info.st_size > most:
            raise self._refused(path, f"has {info.st_size:,} bytes, more than the {most:,} the server writes")

    def _read(self) -> dict[str, Parked]:
        try:
            fd = os.open(self.file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        except OSError as exc:  # ELOOP: a symbolic link
            raise self._refused(self.file, f"cannot be opened ({exc.strerror or exc}): it is not the file cellgate "
                                           "writes") from None
        try:
            self._check_file(self.file, os.fstat(fd), MAX_BYTES)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as file:
            raw = file.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise self._refused(self.file, f"has more than the {MAX_BYTES:,} bytes the server writes")
        try:
            parsed = ParkedFile.model_validate_json(raw)
        except ValidationError as exc:
            raise self._refused(self.file, f"is not a list of paused sessions cellgate wrote ({exc.error_count()} "
                                           f"problems, the first: {exc.errors()[0]['msg']})") from None
        if parsed.format != FORMAT:
            raise self._refused(self.file, f"is of format {parsed.format}, not {FORMAT} (a server before issue 42 "
                                           "wrote it without the host key's MAC over the owners)")
        if parsed.mac is None:
            raise self._refused(self.file, "has no mac: it was not written by cellgate mcp serve")
        if not load_host_key(create=False).check(signed(parsed.sessions), MAC_PURPOSE, parsed.mac):
            raise self._refused(self.file, "is not signed by this host's key (its mac does not match what it says): "
                                           "it was edited, or written with another host key, and none of its "
                                           "sessions is resumed")
        return {handle: parked for handle, parked in parsed.sessions.items() if re.match(HANDLE, handle)}

    def _write(self, sessions: dict[str, Parked]) -> None:
        mac = load_host_key().mac(signed(sessions), MAC_PURPOSE)
        text = ParkedFile(format=FORMAT, sessions=sessions, mac=mac).model_dump_json(indent=1)
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
