"""A live session's checkpoint manifest (``session.live``): written under the host key, read back whole or refused
with what is wrong; and the gate's secrets carried across it (``calls.scrubber``)."""

from __future__ import annotations

import base64
import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import SessionError
from cellgate.gate._json import canonical_json
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
    assert oct((folder / live.IMAGE).stat().st_mode & 0o777) == "0o700"  # runsc makes it 0755


def test_the_folder_is_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)  # mkdir alone would make it 0500: not even its owner could write the checkpoint
    try:
        folder = live.new_folder(tmp_path / "checkpoint")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_the_gates_secrets_are_sealed_in_the_manifest_and_open_only_with_this_hosts_key(tmp_path: Path) -> None:
    folder = checkpoint_folder(tmp_path)
    write(folder, secrets={"tok-ann-s3cr3t": "[secret: issue_token result token]"})
    text = (folder / live.MANIFEST).read_text()
    assert "tok-ann-s3cr3t" not in text and "[secret: issue_token" not in text
    assert isinstance(json.loads(text)["secrets"], str)  # base64 of nonce and AES-GCM ciphertext
    assert live.read_checkpoint(folder).secrets == {"tok-ann-s3cr3t": "[secret: issue_token result token]"}


def resign(folder: Path, change: Any) -> None:
    """The manifest changed and signed again with this host's key (what only this host could do)."""
    manifest = folder / live.MANIFEST
    body = json.loads(manifest.read_text())
    body.pop("mac")
    change(body)
    body["mac"] = hostkey.load().mac(canonical_json(body).encode(), live.MAC_PURPOSE)
    manifest.write_text(json.dumps(body))


def flip_a_ciphertext_byte(body: dict[str, Any]) -> None:
    raw = bytearray(base64.b64decode(body["secrets"]))
    raw[-1] ^= 1
    body["secrets"] = base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("change, says", [
    # Sealed under another key (signed with this one): the secrets do not open.
    (lambda body: body.update(secrets=live_seal_under(os.urandom(32), body["id"])), "do not open with this host's key"),
    (flip_a_ciphertext_byte, "do not open with this host's key"),
    (lambda body: body.update(id="fedcba9876543210"), "do not open with this host's key"),  # bound to the id
    (lambda body: body.update(secrets="not base64!"), "do not open with this host's key"),
    (lambda body: body.update(secrets={"tok-ann-s3cr3t": "[secret: x]"}), "do not open with this host's key"),
    (lambda body: body.update(format=1, secrets={"tok-ann-s3cr3t": "[secret: x]"}),
     "is a checkpoint of format 1, which kept the gate's secrets and the kernel's memory in plaintext"),
    (lambda body: body.update(format=2), "is a checkpoint of format 2, which kept the kernel's memory (its image) "
                                         "in plaintext"),
])
def test_sealed_secrets_under_another_key_altered_or_of_the_old_format_are_refused(
        tmp_path: Path, change: Any, says: str) -> None:
    folder = checkpoint_folder(tmp_path)
    write(folder, secrets={"tok-ann-s3cr3t": "[secret: issue_token result token]"})
    resign(folder, change)
    with pytest.raises(SessionError) as refused:
        live.read_checkpoint(folder)
    assert says in str(refused.value)


def live_seal_under(key: bytes, checkpoint_id: str) -> str:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(live.NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, b'{"tok-ann-s3cr3t":"[secret: x]"}', checkpoint_id.encode())
    return base64.b64encode(nonce + sealed).decode()


def test_discard_removes_a_checkpoint_and_follows_no_link_in_its_image(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("kept")
    folder = checkpoint_folder(tmp_path)
    checkpoint = write(folder)
    (folder / live.IMAGE / "planted").symlink_to(outside)  # the image is runsc's: treated as hostile
    live.discard(replace(checkpoint, kept=False))  # a fork's nobody named: the run root's
    assert not folder.exists() and (outside / "keep.txt").read_text() == "kept"


def test_discard_keeps_a_folder_the_caller_named_and_removes_its_plaintext(tmp_path: Path) -> None:
    folder = checkpoint_folder(tmp_path)
    plain = tmp_path / "work" / live.IMAGE
    plain.mkdir(parents=True)
    (plain / "pages.img").write_bytes(b"memory")
    live.discard(replace(write(folder), plain_image=plain))
    assert live.read_checkpoint(folder).path == folder and not plain.parent.exists()


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
