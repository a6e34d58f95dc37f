"""Wheels unpacked within bounds: what ``%pip install`` puts into a session's package layer.

A wheel is hostile input: a zip whose central directory says what it holds and whose data may say otherwise.
The invariant: no byte is written for a wheel whose central directory is over a bound, and no more bytes are
written for any wheel than its central directory declared and the bounds allow. The threats and their guards:

- a wheel bomb (a 1 MB wheel declaring gigabytes, or a million files): every wheel of an install is read as a
  central directory first, and the install is refused when the total declared size (with what the layer already
  holds), the number of files, one file's size or one file's compression ratio is over its bound;
- a central directory that understates a file (its data inflates past the size it declares): each file is
  copied in chunks with a byte counter against its declared size and the install's bound, and a file whose data
  does not match its entry (zipfile's CRC check, at the declared size) stops the install;
- a name that leaves the layer or a link (absolute, ``..``, a backslash, a symlink, a device): refused;
- a wheel in the cache changed on disk: :func:`open_verified` copies the bytes once, hashing them, into a private
  unlinked file, and what is unpacked is that copy, never the path opened again.

An install is staged in a folder beside the layer (never the layer itself, which the sandbox sees), then its
top-level items replace the layer's (pip's ``--target --upgrade``); anything refused leaves the layer as it was.

Errors: ``PackageRefused`` (the message goes back to the cell) ─ ``WheelRefused`` (which wheel, which bound).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, Literal

MAX_FILES: Final = 100_000  # files in one install (the largest wheels on PyPI hold some tens of thousands)
MAX_RATIO: Final = 200  # one file's size over its compressed size; text wheels measure 3-17 (pip, setuptools)
RATIO_FROM: Final = 1 << 20  # the ratio bound applies to files of at least this size (MAX_FILES bounds the rest)
CHUNK: Final = 1 << 16
COMPILE_TIMEOUT: Final = 600.0

Problem = Literal["max_unpacked_mb", "max_mb", "files", "ratio", "name", "link", "corrupt", "changed"]


class PackageRefused(Exception):
    """An install the host refuses; its message goes back to the cell (and into the record)."""


class WheelRefused(PackageRefused):
    """One wheel refused, and why: ``code`` names the bound or the fault, ``value`` what was found."""

    def __init__(self, message: str, *, wheel: str, code: Problem, value: int | str) -> None:
        super().__init__(message)
        self.wheel = wheel
        self.code: Problem = code
        self.value = value


@dataclass(frozen=True)
class Limits:
    """The bounds of one install: ``total_bytes`` is ``[packages] max_unpacked_mb`` (what the layer may hold,
    unpacked), ``file_bytes`` is ``[packages] max_mb`` (one file, as much as one install may download)."""

    total_bytes: int
    file_bytes: int
    files: int = MAX_FILES
    ratio: int = MAX_RATIO


@dataclass(frozen=True)
class Member:
    """One file or folder of a wheel, read from its central directory, and where it goes in the layer."""

    info: zipfile.ZipInfo
    dest: str  # relative to the layer, checked


def open_verified(path: Path, digest: str, scratch: Path) -> IO[bytes]:
    """The bytes of ``path`` whose sha256 is ``digest``, as a private unlinked copy in ``scratch`` (opened once,
    without following a link; what is hashed is what is unpacked); WheelRefused if they are not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise PackageRefused(f"the wheel {path.name} (sha256 {digest}) is not in the wheel cache {path.parent.parent}"
                             f" ({exc.strerror}): replay it on the host that recorded the run") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which raises its own error for a folder
        os.close(fd)
        raise WheelRefused(f"the cached wheel {path} is not a regular file: nothing was installed; remove it and "
                           "install again", wheel=path.name, code="changed", value="not a file")
    copy = tempfile.TemporaryFile(dir=scratch)
    try:
        with os.fdopen(fd, "rb") as source:
            hashed = hashlib.sha256()
            while chunk := source.read(CHUNK):
                hashed.update(chunk)
                copy.write(chunk)
        if hashed.hexdigest() != digest:
            raise WheelRefused(f"the cached wheel {path} has changed on disk (its sha256 is now {hashed.hexdigest()},"
                               f" kept as {digest}): nothing was installed; remove it (an install fetches it again) "
                               "and find out what wrote the wheel cache", wheel=path.name, code="changed",
                               value=hashed.hexdigest())
        copy.seek(0)
        return copy
    except BaseException:
        copy.close()
        raise


def data_dir(file: str) -> str:
    """The wheel's ``NAME-VERSION.data`` folder, from its file name (the wheel spec's)."""
    name, version = file.split("-")[:2]
    return f"{name}-{version}.data"


def plan(archive: zipfile.ZipFile, file: str) -> list[Member]:
    """Every member of one wheel with where it goes; WheelRefused for a name that leaves the layer or a link."""
    members, seen = [], set()
    for info in archive.infolist():
        refuse = _refuser(file, info.filename)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            raise refuse("is a symbolic link (a wheel holds files only)", "link")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise refuse(f"is not a file or a folder (mode {info.external_attr >> 16:o})", "link")
        if info.flag_bits & 0x1:
            raise refuse("is encrypted", "corrupt")
        dest = _dest(info.filename, data_dir(file), refuse)
        if dest in seen:
            raise refuse("is in the wheel twice", "name")
        seen.add(dest)
        members.append(Member(info, dest))
    return members


def check(planned: Sequence[tuple[str, list[Member]]], limits: Limits, held: int) -> None:
    """The install's wheels against the bounds, from their central directories alone (``held``: what the layer
    holds already); WheelRefused naming the bound, before anything is written."""
    total, count = held, 0
    for file, members in planned:  # the install as a whole first: its total is the bound a bomb is about
        count += len(members)
        total += sum(member.info.file_size for member in members)
        if count > limits.files:
            raise WheelRefused(f"the wheels of this install hold more than {limits.files} files (at {file}): nothing "
                               "was installed", wheel=file, code="files", value=count)
        if total > limits.total_bytes:
            raise WheelRefused(_over_total(file, total, held, limits), wheel=file, code="max_unpacked_mb",
                               value=total)
    for file, members in planned:
        for member in members:
            size, packed = member.info.file_size, member.info.compress_size
            if size > limits.file_bytes:
                raise WheelRefused(f"{file}: {member.info.filename!r} unpacks to {size >> 20} MB, over [packages] "
                                   f"max_mb = {limits.file_bytes >> 20} for one file: nothing was installed; raise "
                                   "max_mb to install it", wheel=file, code="max_mb", value=size)
            if size >= RATIO_FROM and size > limits.ratio * max(packed, 1):
                raise WheelRefused(f"{file}: {member.info.filename!r} unpacks to {size} bytes from {packed}, more than "
                                   f"{limits.ratio} times: a wheel bomb; nothing was installed", wheel=file,
                                   code="ratio", value=size // max(packed, 1))


def unpack(archive: zipfile.ZipFile, file: str, members: list[Member], staging: Path, budget: list[int]) -> None:
    """Copy each member into ``staging``, counted: no file past its declared size, no install past ``budget[0]``
    bytes left (decreased as bytes are written)."""
    for member in members:
        target = staging / member.dest
        if member.info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o755 if (member.info.external_attr >> 16) & 0o111 else 0o644
        if os.path.lexists(target):  # the same file from another wheel of this install: the later one wins (pip)
            os.unlink(target)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        os.fchmod(fd, mode)  # the sandbox's user reads the layer, whatever this process's umask
        with os.fdopen(fd, "wb") as out:
            try:
                with archive.open(member.info) as source:
                    copy_bounded(source, out, member.info.file_size, budget, file, member.info.filename)
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
                raise WheelRefused(f"{file}: {member.info.filename!r} does not match its entry in the wheel's central "
                                   f"directory ({exc}), stopped at {out.tell()} bytes of the {member.info.file_size} "
                                   "it declares: the wheel is corrupt or a wheel bomb; nothing was installed",
                                   wheel=file, code="corrupt", value=out.tell()) from None


def copy_bounded(source: IO[bytes], out: IO[bytes], declared: int, budget: list[int], file: str, name: str) -> None:
    """``source`` into ``out`` in chunks, never more than ``declared`` bytes nor more than ``budget[0]``."""
    written = 0
    while chunk := source.read(CHUNK):
        written += len(chunk)
        if written > declared:
            raise WheelRefused(f"{file}: {name!r} holds more than the {declared} bytes its central directory declares:"
                               f" a wheel bomb, stopped at {declared}; nothing was installed", wheel=file,
                               code="corrupt", value=written)
        if len(chunk) > budget[0]:
            raise WheelRefused(f"{file}: the install came to its bound, [packages] max_unpacked_mb, while writing "
                               f"{name!r}: stopped; nothing was installed", wheel=file, code="max_unpacked_mb",
                               value=written)
        budget[0] -= len(chunk)
        out.write(chunk)


def tree_bytes(folder: Path) -> int:
    """The size of the files under ``folder`` (links not followed)."""
    total = 0
    for parent, _dirs, files in os.walk(folder):
        total += sum(os.lstat(os.path.join(parent, name)).st_size for name in files)
    return total


def install(layer: Path, wheels: Sequence[tuple[str, IO[bytes]]], limits: Limits, compile_pyc: bool) -> None:
    """Unpack ``wheels`` (file name, verified bytes) into ``layer`` within ``limits``: all central directories
    checked first, then staged beside the layer, counted, compiled (``compile_pyc``) and moved in."""
    held = tree_bytes(layer)
    archives = []
    try:
        for file, data in wheels:
            try:
                archives.append((file, zipfile.ZipFile(data)))
            except (zipfile.BadZipFile, OSError, ValueError) as exc:
                raise WheelRefused(f"{file} is not a readable wheel ({exc}): nothing was installed", wheel=file,
                                   code="corrupt", value=str(exc)[:200]) from None
        planned = [(file, plan(archive, file)) for file, archive in archives]
        check(planned, limits, held)
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=layer.parent))
        try:
            budget = [limits.total_bytes - held]
            for (file, archive), (_, members) in zip(archives, planned, strict=True):
                unpack(archive, file, members, staging, budget)
            if compile_pyc:
                _compile(staging)
            _move_in(staging, layer)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        for _, archive in archives:
            archive.close()


def _over_total(file: str, total: int, held: int, limits: Limits) -> str:
    return (f"the wheels of this install declare {total - held >> 20} MB unpacked (at {file}), and the session's "
            f"packages hold {held >> 20} MB: over [packages] max_unpacked_mb = {limits.total_bytes >> 20}; nothing "
            "was installed (raise max_unpacked_mb if these wheels are meant to be that large)")


def _refuser(file: str, name: str) -> Callable[[str, Problem], WheelRefused]:
    def refuse(why: str, code: Problem) -> WheelRefused:
        return WheelRefused(f"{file}: the member {name[:200]!r} {why}: nothing was installed", wheel=file, code=code,
                            value=name[:200])

    return refuse


def _dest(name: str, data: str, refuse: Callable[[str, Problem], WheelRefused]) -> str:
    """Where a member goes in the layer (pip's ``--target``: the data folder's purelib, platlib and data at the
    top, scripts in bin, headers in include); WheelRefused for a name that could leave it."""
    parts = name.rstrip("/").split("/")
    if (not name or name.startswith("/") or "\\" in name or "\x00" in name or ":" in parts[0]
            or any(part in ("", ".", "..") for part in parts)):
        raise refuse("is absolute, has '..', or is not a plain relative name", "name")
    if parts[0] != data:
        return "/".join(parts)
    scheme, rest = (parts[1], parts[2:]) if len(parts) > 1 else ("", [])
    if scheme in ("purelib", "platlib", "data") and rest:
        return "/".join(rest)
    if scheme == "scripts" and rest:
        return "/".join(["bin", *rest])
    if scheme == "headers" and rest:
        return "/".join(["include", data.split("-")[0], *rest])
    if not rest:
        return "/".join(parts)  # the data folder itself, or one of its schemes: a folder entry
    raise refuse(f"is in {data}/{scheme}, which is no install scheme", "name")


def _compile(staging: Path) -> None:
    """Byte-compile what was staged (pip's default), in a process of its own: no code of the wheel runs."""
    try:
        subprocess.run([sys.executable, "-I", "-m", "compileall", "-q", str(staging)], capture_output=True,
                       timeout=COMPILE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        pass  # uncompiled files still import; the sandbox compiles them in memory


def _move_in(staging: Path, layer: Path) -> None:
    """Each top-level item staged replaces the layer's item of that name (pip's ``--target --upgrade``)."""
    for parent, dirs, _files in os.walk(staging):
        for name in dirs:
            os.chmod(os.path.join(parent, name), 0o755)
    for item in sorted(os.listdir(staging)):
        target = layer / item
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.unlink(target)
        os.rename(staging / item, target)


__all__ = ["Limits", "PackageRefused", "WheelRefused", "check", "copy_bounded", "install", "open_verified", "plan",
           "tree_bytes", "unpack"]
