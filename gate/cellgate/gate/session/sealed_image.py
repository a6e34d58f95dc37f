"""A kept checkpoint's image, sealed: the kernel's memory never lies on disk in plaintext.

runsc saves a sandbox into a folder of files (``pages.img`` is the kernel's memory: whatever a tool handed the
program is in it). The host has runsc write into a folder of the host's private run root (``runtime_dir``), seals
every file from there into the checkpoint's folder and removes the plaintext; a resume unseals into another such
folder only for the ``runsc restore`` and removes it after. A fork's checkpoint that nobody keeps never leaves the
run root, and is not sealed.

Each file is AES-GCM in chunks of ``CHUNK`` bytes, streamed (an image is as large as the sandbox's memory)::

    MAGIC  nonce prefix (8 bytes)  chunk 0 ... chunk n       each chunk: ciphertext and its 16-byte tag

A chunk's nonce is the prefix and its index; its associated data names the checkpoint, the file, the index and
whether it is the last, so a chunk moved to another place, file or checkpoint, a file cut at a chunk's edge or
grown does not open. The key is the host key's MAC of the checkpoint's id under its own purpose: one key per
checkpoint, only this host's key gives it.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import SessionError
from cellgate.gate._guarded import Folder, remove_tree_quietly
from cellgate.gate.sandbox.runtime_dir import private_dir, run_root

PURPOSE = "cellgate-checkpoint-image"
MAGIC = b"cellgate-sealed-image-1\n"
CHUNK = 4 << 20
TAG = 16
PREFIX = 8
MAX_FILES = 256
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _key(checkpoint_id: str, create: bool) -> AESGCM:
    return AESGCM(bytes.fromhex(hostkey.load(create=create).mac(checkpoint_id.encode(), PURPOSE)))


def _associated(checkpoint_id: str, name: str, index: int, final: bool) -> bytes:
    return b"\0".join((checkpoint_id.encode(), name.encode(), str(index).encode(), b"1" if final else b"0"))


def work_folder() -> Path:
    """A new folder of the host's private run root for an image in plaintext (0700, this user's alone)."""
    folder = private_dir(run_root() / "checkpoints") / secrets.token_hex(8)
    folder.mkdir(mode=0o700)
    return folder


def _files(folder: Folder) -> list[str]:
    """The names of a flat image folder: regular files only, at most ``MAX_FILES``."""
    names = sorted(folder.names())
    if len(names) > MAX_FILES:
        raise SessionError(f"the checkpoint's image {folder.path} holds more than {MAX_FILES} files; it was altered")
    for name in names:
        info = folder.lstat(name)
        if info is None or not stat.S_ISREG(info.st_mode):
            raise SessionError(f"the checkpoint's image holds {name!r}, which is not a regular file; it was "
                               "altered: make a new checkpoint")
    return names


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = os.read(fd, left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def seal(plain: Path, sealed: Path, checkpoint_id: str) -> None:
    """Seal every file of image folder ``plain`` into the new folder ``sealed`` (0700, files 0600)."""
    key = _key(checkpoint_id, create=True)
    sealed.mkdir(mode=0o700)
    with Folder.open(plain) as source, Folder.open(sealed) as target:
        os.fchmod(target.fd, 0o700)
        for name in _files(source):
            reader = source.open_file(name)
            writer = os.open(name, _NEW, 0o600, dir_fd=target.fd)
            try:
                prefix = secrets.token_bytes(PREFIX)
                _write_all(writer, MAGIC + prefix)
                index, chunk = 0, _read_exactly(reader, CHUNK)
                while True:
                    following = _read_exactly(reader, CHUNK) if len(chunk) == CHUNK else b""
                    final = not following
                    nonce = prefix + index.to_bytes(4, "big")
                    _write_all(writer, key.encrypt(nonce, chunk, _associated(checkpoint_id, name, index, final)))
                    if final:
                        break
                    index, chunk = index + 1, following
            finally:
                os.close(reader)
                os.close(writer)


def unseal(sealed: Path, checkpoint_id: str) -> Path:
    """The image of ``sealed`` in plaintext, in a new ``work_folder`` (the caller removes it, with
    ``remove_tree_quietly``, once runsc has restored from it); SessionError if any chunk does not open."""
    key = _key(checkpoint_id, create=False)
    work = work_folder()
    try:
        plain = work / "image"
        plain.mkdir(mode=0o700)
        with Folder.open(sealed) as source, Folder.open(plain) as target:
            for name in _files(source):
                _unseal_file(key, source, target, name, checkpoint_id)
    except BaseException:
        remove_tree_quietly(work)
        raise
    return plain


def _unseal_file(key: AESGCM, source: Folder, target: Folder, name: str, checkpoint_id: str) -> None:
    reader = source.open_file(name)
    writer = os.open(name, _NEW, 0o600, dir_fd=target.fd)
    try:
        head = _read_exactly(reader, len(MAGIC) + PREFIX)
        if len(head) != len(MAGIC) + PREFIX or not head.startswith(MAGIC):
            raise _altered(source, name, "it is not a sealed image file")
        prefix, index = head[len(MAGIC):], 0
        chunk = _read_exactly(reader, CHUNK + TAG)
        while True:
            following = _read_exactly(reader, CHUNK + TAG) if len(chunk) == CHUNK + TAG else b""
            final = not following
            try:
                opened = key.decrypt(prefix + index.to_bytes(4, "big"), chunk,
                                     _associated(checkpoint_id, name, index, final))
            except InvalidTag:
                raise _altered(source, name, f"its chunk {index} does not open") from None
            _write_all(writer, opened)
            if final:
                return
            index, chunk = index + 1, following
    finally:
        os.close(reader)
        os.close(writer)


def _altered(folder: Folder, name: str, why: str) -> SessionError:
    return SessionError(f"the checkpoint's image file {os.path.join(folder.path, name)} does not open with this "
                        f"host's key ({why}): it was made on another host, altered or cut short, and is not resumed")


def release(plain_image: Path) -> None:
    """Remove a plaintext image ``unseal`` or ``work_folder`` made (its work folder with it)."""
    remove_tree_quietly(plain_image.parent)
