"""``_guarded``: a folder someone else writes is touched through its descriptor, never through a planted name."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cellgate.gate._guarded import Folder, UnsafePath, remove_tree


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with a link, a FIFO, a folder and a hard link in it, and the host file the links reach."""
    host = tmp_path / "host-file"
    host.write_text("the host's")
    os.chmod(host, 0o600)
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "link").symlink_to(host)
    os.mkfifo(folder / "fifo")
    (folder / "folder").mkdir()
    (folder / "own").write_text("x")
    os.link(folder / "own", folder / "hard")
    return folder, host


@pytest.mark.parametrize("name", ["link", "fifo", "folder", "hard"])
def test_nothing_but_a_file_of_one_name_is_read(planted: tuple[Path, Path], name: str) -> None:
    folder, _ = planted
    with Folder.open(folder) as shared:
        assert not shared.has_file(name)
        with pytest.raises(OSError):  # UnsafePath, or EISDIR for a folder: never a block on the FIFO
            shared.read(name, 100)


@pytest.mark.parametrize("name", ["link", "fifo", "folder", "hard"])
def test_a_new_file_is_never_written_through_what_is_there(planted: tuple[Path, Path], name: str) -> None:
    folder, host = planted
    owner = (1000, 1000) if os.geteuid() == 0 else (os.getuid(), os.getgid())  # as root: the sandbox's uid
    with Folder.open(folder) as shared:
        with pytest.raises(FileExistsError):
            shared.write_new(name, b"written", owner=owner)
        shared.remove(name)
        shared.write_new(name, b"written", mode=0o644, owner=owner)
        assert shared.read(name, 100) == b"written"
    info = os.lstat(folder / name)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (owner[0], 0o644)
    assert host.read_text() == "the host's" and os.lstat(host).st_uid == os.getuid()
    assert (folder / "own").read_text() == "x"  # the hard link's other name is untouched


def test_a_link_in_place_of_a_folder_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").write_text("kept")
    os.chmod(target, 0o500)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UnsafePath, match="not a folder"):
        Folder.open(tmp_path / "link")
    remove_tree(tmp_path / "link")
    assert not os.path.lexists(tmp_path / "link")
    assert (target / "kept").read_text() == "kept" and stat.S_IMODE(os.lstat(target).st_mode) == 0o500
