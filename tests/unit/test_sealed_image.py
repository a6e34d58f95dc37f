"""A kept checkpoint's image sealed file by file (``session.sealed_image``): it opens back byte for byte with this
host's key and that checkpoint's id, and a chunk changed, moved, dropped or added, a file cut short or grown, or
another checkpoint's id does not open; the plaintext goes only into the host's private run root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cellgate.gate._errors import SessionError
from cellgate.gate.sandbox.runtime_dir import run_root
from cellgate.gate.session import sealed_image

CHUNK = 64  # small chunks, so every file here spans several
ID = "0123456789abcdef"


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sealed_image, "CHUNK", CHUNK)
    monkeypatch.setenv("CELLGATE_RUN_ROOT", str(tmp_path / "run"))


def image(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    plain = tmp_path / "plain"
    plain.mkdir()
    files = {"pages.img": os.urandom(CHUNK * 5 + 7), "checkpoint.img": b"state", "exact.img": os.urandom(CHUNK * 2),
             "empty.img": b""}
    for name, data in files.items():
        (plain / name).write_bytes(data)
    return plain, files


def sealed(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    plain, files = image(tmp_path)
    folder = tmp_path / "sealed"
    sealed_image.seal(plain, folder, ID)
    return folder, files


def opened(folder: Path, checkpoint_id: str = ID) -> dict[str, bytes]:
    plain = sealed_image.unseal(folder, checkpoint_id)
    try:
        return {path.name: path.read_bytes() for path in plain.iterdir()}
    finally:
        sealed_image.release(plain)


def test_an_image_opens_back_byte_for_byte_and_its_plaintext_only_in_the_run_root(tmp_path: Path) -> None:
    folder, files = sealed(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    for name, data in files.items():
        text = (folder / name).read_bytes()
        assert data[:32] not in text or not data  # ciphertext, not the memory
        assert (folder / name).stat().st_mode & 0o777 == 0o600
    plain = sealed_image.unseal(folder, ID)
    assert plain.is_relative_to(run_root()) and plain.parent.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.read_bytes() for p in plain.iterdir()} == files
    sealed_image.release(plain)
    assert not plain.parent.exists()


def chunk_at(index: int) -> slice:
    start = len(sealed_image.MAGIC) + sealed_image.PREFIX + index * (CHUNK + sealed_image.TAG)
    return slice(start, start + CHUNK + sealed_image.TAG)


def flip(data: bytearray) -> None:
    data[chunk_at(2).start + 3] ^= 1


def swap(data: bytearray) -> None:
    first, second = bytes(data[chunk_at(1)]), bytes(data[chunk_at(2)])
    data[chunk_at(1)], data[chunk_at(2)] = second, first


def drop_last(data: bytearray) -> None:  # cut at a chunk's edge: what is left looks whole
    del data[chunk_at(5).start:]


def drop_middle(data: bytearray) -> None:
    del data[chunk_at(1)]


def cut_inside(data: bytearray) -> None:
    del data[-5:]


def grow(data: bytearray) -> None:  # a chunk of its own appended after the last
    data += data[chunk_at(0)]


def new_header(data: bytearray) -> None:
    data[:len(sealed_image.MAGIC)] = b"x" * len(sealed_image.MAGIC)


@pytest.mark.parametrize("damage", [flip, swap, drop_last, drop_middle, cut_inside, grow, new_header])
def test_a_changed_moved_dropped_or_added_chunk_does_not_open(tmp_path: Path, damage: object) -> None:
    folder, _ = sealed(tmp_path)
    data = bytearray((folder / "pages.img").read_bytes())
    damage(data)  # type: ignore[operator]
    (folder / "pages.img").write_bytes(bytes(data))
    with pytest.raises(SessionError, match="pages.img does not open with this host's key"):
        opened(folder)
    assert not list((run_root() / "checkpoints").iterdir())  # nothing half-opened is left


def test_a_file_under_another_name_or_checkpoint_does_not_open(tmp_path: Path) -> None:
    folder, _ = sealed(tmp_path)
    with pytest.raises(SessionError, match="does not open with this host's key"):
        opened(folder, "fedcba9876543210")
    (folder / "exact.img").unlink()
    (folder / "pages.img").rename(folder / "exact.img")  # the name is in every chunk's associated data
    with pytest.raises(SessionError, match="exact.img does not open"):
        opened(folder)


def test_a_link_or_folder_in_a_sealed_image_is_refused_not_followed(tmp_path: Path) -> None:
    folder, _ = sealed(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    (folder / "planted").symlink_to(outside)
    with pytest.raises(SessionError, match="'planted', which is not a regular file"):
        opened(folder)
    assert outside.read_text() == "host file"
