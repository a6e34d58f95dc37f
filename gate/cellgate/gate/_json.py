"""Small shared helpers: canonical JSON and its digest, timestamps, atomic file writes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cellgate.gate._faults import failpoint

try:  # the journal's modules also run on another user's bare interpreter (tests/security/test_other_users.py)
    import orjson
except ModuleNotFoundError:  # pragma: no cover - the gate's own environment has it
    orjson = None  # type: ignore[assignment]


def canonical_json(value: Any) -> str:
    """One spelling of a JSON value: sorted keys, no spaces, no NaN; what every digest is taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# Where orjson's spelling can differ from json's: a float in exponent form (a digit, e, a digit or minus) or in
# [1e-5, 1e-4) (json writes 1e-05, orjson 0.00001), and NaN or an infinity (json refuses them, orjson writes
# null). A string holding such text only sends the value the slow way. The pattern opens with its literal "e"
# and looks back for the digit: one opening with a class of digits scans 20 times slower.
_EXPONENT = re.compile(rb"e(?<=[0-9]e)[-0-9]")


def _spelled_otherwise(data: bytes) -> bool:
    # rfind, not `in`: CPython searches backwards for a short needle two to three times faster here.
    return data.rfind(b"null") >= 0 or data.rfind(b"0.0000") >= 0 or _EXPONENT.search(data) is not None


# Types orjson would encode that json refuses or spells its own way (dataclasses, datetimes, subclasses of str,
# int, dict, list) are passed through to a ``default`` that is not given: orjson refuses them, json decides.
_ORJSON_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                   | orjson.OPT_PASSTHROUGH_SUBCLASS) if orjson else 0


def json_bytes(value: Any) -> bytes:
    """JSON that decodes to ``value``, fast: orjson's bytes (about ten times faster than json), unless they hold
    ``null`` (orjson also writes NaN so) or orjson refuses the value; then ``canonical_json``'s, which raises as
    it raises (TypeError, ValueError). Not always the canonical spelling: ``canonical_text`` makes that."""
    if orjson is None:
        return canonical_json(value).encode()
    try:
        data = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:  # big integers, non-string keys, lone surrogates, the passed-through types
        return canonical_json(value).encode()
    return data if data.rfind(b"null") < 0 else canonical_json(value).encode()


def canonical_text(value: Any, data: bytes) -> str:
    """``canonical_json(value)``, given ``data = json_bytes(value)``: the same text, decoded from ``data``
    wherever its spelling is json's."""
    return canonical_json(value) if _spelled_otherwise(data) else data.decode()


def canonical_json_fast(value: Any) -> str:
    """``canonical_json(value)``, the same text, made by orjson wherever its bytes are json's."""
    return canonical_text(value, json_bytes(value))


_TWO_SPACE_INDENT = re.compile(rb"\n( +)")


def notebook_json(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)``, nbformat's layout, made by orjson where
    it can: json indents in pure Python (36 ms for a cell of 313 calls here, orjson 1 ms). orjson indents by two, so
    each line's indent is halved (a JSON string holds no raw newline: every newline is the layout's). The same text
    but for floats in exponent form (orjson writes 1e16, json 1e+16) and NaN (null): the same values."""
    if orjson is None:
        return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)
    try:
        data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # big integers, non-string keys, lone surrogates
        return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False)
    return _TWO_SPACE_INDENT.sub(lambda m: b"\n" + m.group(1)[:len(m.group(1)) // 2], data).decode()


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
