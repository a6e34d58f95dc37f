"""``cellgate exec --input FILE[:DEST]`` and ``--output PATH[:DEST]``: files in before the first cell, out after
the last one.

They go through the session's ``upload`` and ``download``: each is recorded by sha256 with its bytes kept as a
blob of the record (``cellgate replay`` puts the inputs back), and none is larger than ``[sandbox]
file_limit_mb``: every input is checked before the first is sent, and read only up to the limit. A host path
with ``:`` in its name cannot be given (the colon starts DEST). An output is written whole or not at all (a
temporary file beside it, then renamed; mode 0600). Every path written (each output's folder, ``--checkpoint``'s new
folder) is checked before the sandbox starts; the notebook's is checked when the session opens it.
"""

from __future__ import annotations

import asyncio
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
    """Before any sandbox starts: every input is a regular file (a pipe or a device could block or never end)."""
    for move in inputs:
        try:
            mode = os.stat(move.source).st_mode
        except OSError as exc:
            raise ConfigError(f"--input {move.source!r}: {exc.strerror or exc}; name a file to upload") from None
        if stat.S_ISDIR(mode):
            raise ConfigError(f"--input {move.source!r} is a folder; name each file (or pack the folder in one)")
        if not stat.S_ISREG(mode):
            raise ConfigError(f"--input {move.source!r} is not a regular file (a pipe or a device); copy what it "
                              "holds to a file and upload that")


def _writable_folder(folder: Path, what: str) -> None:
    if not folder.is_dir():
        raise ConfigError(f"{what}: the folder {str(folder)!r} does not exist; make it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{what}: the folder {str(folder)!r} is not writable by this user; choose another place")


def check_outputs(outputs: list[Move], checkpoint: str | None) -> None:
    """Before any sandbox starts (a run's cells and its kernel's state are not lost to a path refused at the end):
    each ``--output`` goes into a folder that exists and this user may write, and ``--checkpoint DIR`` is a new
    folder (``session.live.new_folder`` refuses an existing path) in such a folder."""
    for move in outputs:
        target = Path(move.dest)
        if target.is_dir():
            _writable_folder(target, f"--output destination {move.dest!r}")
        elif move.dest.endswith("/"):
            raise ConfigError(f"--output destination {move.dest!r} names a folder that does not exist; make it first")
        else:
            _writable_folder(target.absolute().parent, f"--output destination {move.dest!r}")
    if checkpoint is not None:
        folder = Path(checkpoint).expanduser().absolute()
        if os.path.lexists(folder):
            raise ConfigError(f"--checkpoint {checkpoint!r} exists; a checkpoint is written only into a new folder: "
                              "choose another path or remove that one")
        _writable_folder(folder.parent, f"--checkpoint {checkpoint!r}")


def _over(path: str, size: int, limit: int) -> ConfigError:
    return ConfigError(f"--input {path!r} is {size:,} bytes, over the limit of {limit:,} bytes ([sandbox] "
                       f"file_limit_mb = {limit >> 20}); nothing was uploaded. Raise file_limit_mb in cellgate.toml, "
                       "or split the file (or compress it)")


def read_input(path: str, limit: int) -> bytes:
    """The bytes of ``path``, refused past ``limit`` (the session's file limit) without reading the rest."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"--input {path!r} cannot be read: {exc.strerror or exc}; nothing was uploaded") from None
    if len(data) > limit:  # it grew since it was checked
        raise _over(path, len(data), limit)
    return data


def write_output(dest: str, name: str, data: bytes) -> Path:
    """``data`` at ``dest`` (as ``name`` inside it, when it is a folder), whole or not at all."""
    target = Path(dest)
    if target.is_dir():
        target = target / name
    elif dest.endswith("/"):
        raise ConfigError(f"--output destination {dest!r} names a folder that does not exist; make it first")
    if not target.parent.is_dir():
        raise ConfigError(f"--output destination {dest!r}: the folder {str(target.parent)!r} does not exist; "
                          "make it first")
    try:
        write_atomically(target, data)
    except OSError as exc:
        raise ConfigError(f"--output {str(target)!r} cannot be written: {exc.strerror or exc}; the file is kept "
                          "whole in the run's record (a blob named by its sha256 beside the audit notebook)") from None
    return target


async def upload_inputs(session: Session, inputs: list[Move]) -> list[str]:
    """Each input into the sandbox, none if one is over the limit; a line per file saying where it went."""
    limit = session.settings.sandbox.file_limit_mb << 20
    for move in inputs:
        size = os.stat(move.source).st_size
        if size > limit:
            raise _over(move.source, size, limit)
    said = []
    for move in inputs:
        data = await asyncio.to_thread(read_input, move.source, limit)
        record = await session.upload(move.dest, data)
        said.append(f"uploaded {move.source} to {record.path} ({record.size:,} bytes, sha256 {record.sha256[:16]})")
    return said


async def download_outputs(session: Session, outputs: list[Move]) -> list[str]:
    """Each output out of the sandbox; a line per file saying where it went."""
    said = []
    for move in outputs:
        data = await session.download(move.source)
        name = os.path.basename(move.source.rstrip("/"))
        written = await asyncio.to_thread(write_output, move.dest, name, data)
        said.append(f"downloaded {move.source} to {written} ({len(data):,} bytes)")
    return said
