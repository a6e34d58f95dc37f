"""Security round 4 (issue 42, finding 7): `cellgate image gc` and `rm` remove what is in the image store, never
what a link there points to.

An image's folders are made read-only, so removing one makes them writable first: through a path, a symlinked
``sha256-*`` entry (or a link inside an image) had its target chmodded and removed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cellgate.gate.sandbox.images import store


def read_only_tree(root: Path) -> None:
    (root / "rootfs" / "usr").mkdir(parents=True)
    (root / "rootfs" / "usr" / "file").write_text("content")
    for folder in (root / "rootfs" / "usr", root / "rootfs", root):
        os.chmod(folder, 0o555)


def state(path: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(path)), stat.S_IMODE(os.lstat(p).st_mode)) for p in [path, *path.rglob("*")])


@pytest.fixture
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "store"
    (folder / "tmp").mkdir(parents=True)
    monkeypatch.setenv("CELLGATE_IMAGE_STORE", str(folder))
    return folder


def test_gc_removes_a_symlinked_image_entry_itself_and_leaves_its_target_as_it_was(
        own_store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("a host file")
    os.chmod(outside, 0o500)
    before = state(outside)
    (own_store / f"{store.DIGEST_PREFIX}{'a' * 64}").symlink_to(outside)
    (own_store / "tmp" / "build-1").symlink_to(outside)

    removed = store.gc()

    assert sorted(removed) == [f"{store.DIGEST_PREFIX}{'a' * 64}", "tmp/build-1"]
    assert state(outside) == before and (outside / "precious").read_text() == "a host file"
    assert list(own_store.glob(f"{store.DIGEST_PREFIX}*")) == [] and list((own_store / "tmp").iterdir()) == []


def test_a_read_only_image_with_a_link_inside_is_removed_and_the_link_s_target_is_untouched(
        own_store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    read_only_tree(outside)
    before = state(outside)
    image = own_store / "tmp" / "build-2"
    (image / "rootfs").mkdir(parents=True)
    (image / "rootfs" / "lib").symlink_to(outside / "rootfs")
    (image / "rootfs" / "data").write_text("the image's own")
    read_only_tree(image / "more")
    os.chmod(image / "rootfs", 0o555)
    os.chmod(image, 0o555)

    store.delete_tree(image)

    assert not os.path.lexists(image)
    assert state(outside) == before
