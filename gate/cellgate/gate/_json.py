"""Small shared helpers: canonical JSON and its digest, timestamps, atomic file writes."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cellgate.gate._faults import failpoint


def canonical_json(value: Any) -> str:
    """One spelling of a JSON value: sorted keys, no spaces, no NaN; what every digest is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def digest(value: Any) -> str:
    """sha256 (hex) of ``value``'s canonical JSON."""
    return sha256_hex(canonical_json(value))


def sha256_hex(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def utcnow() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_atomically(path: Path, text: str | bytes, durable: bool = True, *, folder_fd: int | None = None) -> None:
    """Temp file in the same folder, rename: never a torn file; with ``durable``, fsync'd file and folder too
    (``text`` as UTF-8, or bytes as they are).

    ``folder_fd``: the folder already open (``path``'s name is written in it, whatever its path leads to now):
    a folder checked once stays the one written to (``audit.owned``)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) if folder_fd is None else folder_fd
    try:
        _write_in(folder, path.name, text, durable)
    finally:
        if folder_fd is None:
            os.close(folder)


def _write_in(folder: int, name: str, text: str | bytes, durable: bool) -> None:
    tmp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text if isinstance(text, bytes) else text.encode("utf-8"))
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        failpoint("notebook-write")
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder)
        except FileNotFoundError:
            pass
        raise
    if durable:
        os.fsync(folder)
