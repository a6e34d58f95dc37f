"""Reading the files a run folder names, as the hostile input they are.

A notebook or journal someone hands the CLI names other files: its journal
(``metadata.cellgate.journal.file``) and its result blobs (a call's
``result_blob``). Those names are data, never trusted paths:

- a name is a relative path of plain components (no absolute path, no ``..``,
  no ``.``, no empty part, no NUL) and is opened one component at a time
  below the run's folder with ``O_NOFOLLOW``, so no symlink leads out;
- only a regular file is read (checked with ``fstat`` on the opened file; it
  is opened ``O_NONBLOCK``, so a FIFO never blocks the open);
- every read has a cap, and a blob's bytes must match its recorded size and
  sha256 before anything parses them.

Everything wrong becomes an ``ArtifactError`` (a ``ConfigError``) that names
the file, says what is wrong with it and what to do.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from cellgate.gate._errors import ArtifactError

MAX_BLOB_BYTES = 64 << 20  # a result blob is never read past this, whatever the recording says
MAX_NOTEBOOK_BYTES = 1 << 30
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symlink"}


def kind_of(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _parts(name: object, what: str) -> list[str]:
    if not isinstance(name, str) or not name:
        raise ArtifactError(f"{what} is named {name!r}, which is not a file name; the recording is damaged or forged")
    parts = name.split("/")
    if name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise ArtifactError(f"{what} is named {name!r}: only a plain relative path inside the run's folder is "
                            "allowed (no absolute path, no '..'); the recording is damaged or forged")
    return parts


def open_regular(path: Path, what: str, *, follow: bool = True) -> int:
    """A read-only fd of ``path``, refused unless it is a regular file (a FIFO never blocks)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ArtifactError(f"{what} {path}: cannot be opened: {exc.strerror}") from None
    return _regular(fd, f"{what} {path}")


def _regular(fd: int, named: str) -> int:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ArtifactError(f"{named} is {kind_of(mode)}, not a regular file; refusing to read it")
    os.set_blocking(fd, True)
    return fd


def open_confined(folder: Path, name: object, what: str) -> int:
    """Open ``folder/name`` for reading, never leaving ``folder``; only a regular file."""
    parts = _parts(name, what)
    try:
        current = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ArtifactError(f"the run folder {folder}: cannot be opened: {exc.strerror}") from None
    try:
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                nxt = os.open(part, flags, dir_fd=current)
            except OSError as exc:
                at = "/".join(parts[:depth + 1])
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink, or a symlink or file where a folder must be
                    reason = "is a symlink or not a folder; names are never followed out of the run's folder"
                else:
                    reason = exc.strerror or str(exc)
                raise ArtifactError(f"{what} {name!r}: {at} in {folder} {reason}") from None
            os.close(current)
            current = nxt
        fd, current = current, -1
        return _regular(fd, f"{what} {name!r} (in {folder})")
    finally:
        if current >= 0:
            os.close(current)


def read_capped(fd: int, cap: int, named: str, why: str = "refusing to read it") -> bytes:
    """All of ``fd`` (closed afterwards), refused if it holds more than ``cap`` bytes."""
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise ArtifactError(f"{named} is larger than {cap:,} bytes, {why}")
    return data


def run_name(journal_file: str) -> str:
    return journal_file.removesuffix(".journal.jsonl")


def journal_name(value: object, notebook: Path) -> str:
    """The journal file a notebook names: a plain ``<name>.journal.jsonl`` beside it."""
    if not value:
        raise ArtifactError(f"{notebook}: its metadata names no journal; is it a cellgate audit notebook?")
    if not isinstance(value, str) or "/" in value or "\0" in value or value in (".", "..") \
            or not value.endswith(".journal.jsonl"):
        raise ArtifactError(f"{notebook}: its metadata names the journal {value!r}; a journal must be a "
                            "<name>.journal.jsonl file beside the notebook. The notebook is damaged or forged")
    return value


def blob_text(folder: Path, journal_file: str, call: dict[str, Any], where: str) -> bytes:
    """The bytes of a call's result blob, after its name, type, size and sha256 check out."""
    name = call.get("result_blob")
    digest = call.get("result_sha256")
    what = f"{where}: the result blob"
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise ArtifactError(f"{what} has no valid result_sha256 ({digest!r}); the recording is damaged or forged")
    expected = f"{run_name(journal_file)}.blobs/{digest}.json"
    if name != expected:
        _parts(name, what)
        raise ArtifactError(f"{what} is named {name!r}, not {expected!r} (the run's own blob folder and the "
                            "result's sha256); the recording is damaged or forged")
    size = call.get("result_bytes")
    cap = size if isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= MAX_BLOB_BYTES \
        else MAX_BLOB_BYTES
    data = read_capped(open_confined(folder, name, what), cap, f"{what} {name!r}",
                       "its recorded size: it was replaced or damaged" if cap == size else "refusing to read it")
    if size != len(data):
        raise ArtifactError(f"{what} {name!r} has {len(data):,} bytes, the recording says {size!r}; "
                            "it was replaced or damaged")
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise ArtifactError(f"{what} {name!r} does not match its sha256 (it hashes to {actual[:16]}…): "
                            "it was replaced or damaged")
    return data


def blob_value(folder: Path, journal_file: str, call: dict[str, Any], where: str) -> Any:
    data = blob_text(folder, journal_file, call, where)
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ArtifactError(f"{where}: the result blob is not JSON: {exc}") from None


__all__ = ["ArtifactError", "MAX_BLOB_BYTES", "blob_text", "blob_value", "journal_name", "open_confined",
           "open_regular", "read_capped", "run_name"]
