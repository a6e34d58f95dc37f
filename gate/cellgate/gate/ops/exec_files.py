"""``cellgate exec --input FILE[:DEST]`` and ``--output PATH[:DEST]``: files in before the first cell, out after
the last one.

They go through the session's ``upload`` and ``download``: each is recorded by sha256 with its bytes kept as a
blob of the record (``cellgate replay`` puts the inputs back), and none is larger than ``[sandbox]
file_limit_mb``. An input is read only up to that limit (a bigger file, or a device that never ends, is refused
without reading the rest); an output is written whole or not at all (a temporary file beside it, then renamed).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cellgate.gate._errors import ConfigError
from cellgate.gate._json import write_atomically

if TYPE_CHECKING:
    from cellgate.gate.session.session import Session

HOW = "give FILE or FILE:DEST (a path, then optionally ':' and where it goes)"


@dataclass(frozen=True)
class Move:
    """One file to move: ``source`` is read, ``dest`` is written (on the host or in the sandbox, by direction)."""

    source: str
    dest: str


def moves(specs: list[str], flag: str) -> list[Move]:
    """``FILE`` or ``FILE:DEST`` per flag given; DEST defaults to the source's own name."""
    found = []
    for spec in specs:
        source, colon, dest = spec.partition(":")
        if not source or (colon and not dest):
            raise ConfigError(f"{flag} {spec!r}: {HOW}")
        name = os.path.basename(source.rstrip("/"))
        if not dest and name in ("", ".", ".."):
            raise ConfigError(f"{flag} {spec!r} names no file; {HOW}")
        found.append(Move(source, dest or name))
    return found


def check_inputs(inputs: list[Move]) -> None:
    """Before any sandbox starts: every input is a file this user can read."""
    for move in inputs:
        try:
            mode = os.stat(move.source).st_mode
        except OSError as exc:
            raise ConfigError(f"--input {move.source!r}: {exc.strerror or exc}; name a file to upload") from None
        if stat.S_ISDIR(mode):
            raise ConfigError(f"--input {move.source!r} is a folder; name each file (or pack the folder in one)")


def read_input(path: str, limit: int) -> bytes:
    """The bytes of ``path``, refused past ``limit`` (the session's file limit) without reading the rest."""
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(f"--input {path!r} is over the limit of {limit:,} bytes ([sandbox] file_limit_mb = "
                          f"{limit >> 20}); nothing was uploaded. Raise file_limit_mb in cellgate.toml, or split the "
                          "file (or compress it)")
    return data


def write_output(dest: str, name: str, data: bytes) -> Path:
    """``data`` at ``dest`` (as ``name`` inside it, when it is a folder), whole or not at all."""
    target = Path(dest)
    if target.is_dir():
        target = target / name
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"--output destination {dest!r}: the folder {str(folder)!r} does not exist; make it first")
    write_atomically(target, data)
    return target


async def upload_inputs(session: Session, inputs: list[Move]) -> list[str]:
    """Each input into the sandbox; a line per file saying where it went and its sha256."""
    limit = session.settings.sandbox.file_limit_mb << 20
    said = []
    for move in inputs:
        record = await session.upload(move.dest, read_input(move.source, limit))
        said.append(f"uploaded {move.source} to {record.path} ({record.size:,} bytes, sha256 {record.sha256[:16]})")
    return said


async def download_outputs(session: Session, outputs: list[Move]) -> list[str]:
    """Each output out of the sandbox; a line per file saying where it went."""
    said = []
    for move in outputs:
        data = await session.download(move.source)
        written = write_output(move.dest, os.path.basename(move.source.rstrip("/")), data)
        said.append(f"downloaded {move.source} to {written} ({len(data):,} bytes)")
    return said
