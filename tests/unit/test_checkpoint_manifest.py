"""A live session's checkpoint manifest (``session.live``): written under the host key, read back whole or refused
with what is wrong; and the gate's secrets carried across it (``calls.scrubber``)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cellgate.gate._errors import SessionError
from cellgate.gate.calls.scrubber import SecretScrubber
from cellgate.gate.session import live


def checkpoint_folder(tmp_path: Path) -> Path:
    folder = live.new_folder(tmp_path / "checkpoint")
    (folder / live.IMAGE).mkdir()
    (folder / live.IMAGE / "pages.img").write_bytes(os.urandom(4096))
    (folder / live.IMAGE / "checkpoint.img").write_bytes(b"state")
    return folder


def write(folder: Path, **extra: Any) -> live.Checkpoint:
    journal: Any = SimpleNamespace(seq=7, head="ab" * 32)
    return live.write_manifest(folder, "pause", "0123456789abcdef", notebook=folder.parent / "run.ipynb",
                               journal=journal, session_id="s" * 32, backend="local", key="k" * 32,
                               secrets=extra.get("secrets", {}))


def test_a_manifest_reads_back_as_written(tmp_path: Path) -> None:
    folder = checkpoint_folder(tmp_path)
    written = write(folder, secrets={"tok-1": "[secret: token]"})
    read = live.read_checkpoint(folder)
    assert read == written
    assert (read.kind, read.journal, read.restore.key) == ("pause", {"seq": 7, "hash": "ab" * 32}, "k" * 32)
    assert read.restore.image == str(folder / live.IMAGE) and read.secrets == {"tok-1": "[secret: token]"}
    assert oct(folder.stat().st_mode & 0o777) == "0o700" and oct((folder / live.MANIFEST).stat().st_mode & 0o777) \
        == "0o600"


def test_a_folder_is_never_written_into_twice(tmp_path: Path) -> None:
    checkpoint_folder(tmp_path)
    with pytest.raises(SessionError, match="exists; a checkpoint is written only into a new folder"):
        live.new_folder(tmp_path / "checkpoint")


@pytest.mark.parametrize("damage, says", [
    ("no-manifest", "is not a cellgate checkpoint"),
    ("not-json", "is not a checkpoint manifest"),
    ("link-in-image", "which is not a regular file"),
    ("extra-file", "the checkpoint's image differs from what was saved (extra.img)"),
    ("no-image", "is missing; the checkpoint is incomplete"),
    ("manifest-link", "is not a regular file"),
])
def test_a_damaged_checkpoint_says_what_is_wrong(tmp_path: Path, damage: str, says: str) -> None:
    folder = checkpoint_folder(tmp_path)
    write(folder)
    manifest, image = folder / live.MANIFEST, folder / live.IMAGE
    if damage == "no-manifest":
        manifest.unlink()
    elif damage == "not-json":
        manifest.write_text("{not json")
    elif damage == "link-in-image":
        (image / "pages.img").unlink()
        (image / "pages.img").symlink_to("/etc/passwd")
    elif damage == "extra-file":
        (image / "extra.img").write_bytes(b"x")
    elif damage == "no-image":
        for part in image.iterdir():
            part.unlink()
        image.rmdir()
    else:
        target = tmp_path / "elsewhere.json"
        target.write_text(manifest.read_text())
        manifest.unlink()
        manifest.symlink_to(target)
    with pytest.raises(SessionError) as refused:
        live.read_checkpoint(folder)
    assert says in str(refused.value)


def test_a_restored_scrubber_scrubs_what_the_first_knew() -> None:
    first = SecretScrubber()
    first.add("tok-ann-s3cr3t", "issue_token result token")
    second = SecretScrubber()
    second.restore(first.known())
    text = "the token is tok-ann-s3cr3t."
    assert second.scrub_text(text) == first.scrub_text(text) == "the token is [secret: issue_token result token]."
