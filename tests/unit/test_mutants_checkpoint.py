"""A live session's checkpoint checks, word for word: the manifest as written (every field, its MAC, its modes), every
refusal of a checkpoint read back (not one, oversize, another format or version, unsigned, its image missing, a link,
changed or cut short), the fork names and launch options, and a paused record resumed (the record's position, its
setup, its gate's budgets and call numbers). No sandbox: manifests and records are made with the module's own writers
and the real Recorder and Dispatcher in temp folders. Assertions that kill mutants of session/live.py
(scripts/mutation checkpoint; CONTRIBUTING, "Mutation testing"); the functions that drive a live sandbox (``_save``,
``pause``, ``fork``) are left to the sandbox tier (tests/sandbox/test_live_sessions.py)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import ConfigError, SessionError
from cellgate.gate._json import canonical_json, sha256_hex
from cellgate.gate._versions import versions
from cellgate.gate.audit.journal import Journal
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.audit.resume import Previous
from cellgate.gate.calls.approval import DenyApprover
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.calls.lineage import Lineage
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.registry import Tool, ToolRegistry
from cellgate.gate.sandbox.checkpoints import Restore
from cellgate.gate.session import live
from cellgate.gate.session.launch import LaunchOptions

ID = "0123456789abcdef"
KEY = "k" * 32
SESSION = "s" * 32


def image_folder(tmp_path: Path, name: str = "checkpoint", files: dict[str, bytes] | None = None) -> Path:
    folder = live.new_folder(tmp_path / name)
    (folder / live.IMAGE).mkdir()
    for file, data in (files or {"pages.img": os.urandom(4096), "checkpoint.img": b"state"}).items():
        (folder / live.IMAGE / file).write_bytes(data)
    return folder


def write(folder: Path, kind: live.Kind = "pause", seq: int = 7, head: str = "ab" * 32,
          **extra: Any) -> live.Checkpoint:
    journal: Any = SimpleNamespace(seq=seq, head=head)
    return live.write_manifest(folder, kind, ID, notebook=extra.pop("notebook", folder.parent / "run.ipynb"),
                               journal=journal, session_id=SESSION, backend="local", key=KEY,
                               secrets=extra.pop("secrets", {"tok-1": "[secret: t]"}), **extra)


def manifest_of(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / live.MANIFEST).read_text()))


def resign(folder: Path, **changes: Any) -> None:
    """The manifest changed and signed again with this host's key (what only this host could do)."""
    body = manifest_of(folder)
    body.pop("mac")
    body.update(changes)
    for key in [k for k, v in changes.items() if v is DROP]:
        del body[key]
    body["mac"] = hostkey.load().mac(canonical_json(body).encode(), live.MAC_PURPOSE)
    (folder / live.MANIFEST).write_text(json.dumps(body))


DROP = object()


def refusal(folder: Path | str) -> str:
    with pytest.raises(SessionError) as refused:
        live.read_checkpoint(folder)
    return str(refused.value)


# ---------------------------------------------------------------------------------------------- the manifest
def test_the_manifest_holds_every_field_signed_and_reads_back_as_the_checkpoint_written(tmp_path: Path) -> None:
    data = os.urandom(5 << 20)  # more than one read of the digest loop (4 MiB)
    folder = image_folder(tmp_path, files={"pages.img": data, "checkpoint.img": b"state"})
    lineage = {"id": "a" * 32, "shares": []}
    written = write(folder, lineage=lineage)
    text = (folder / live.MANIFEST).read_text()
    signed = json.loads(text)
    assert text == json.dumps(signed, indent=1)
    body = {k: v for k, v in signed.items() if k != "mac"}
    assert signed["mac"] == hostkey.load().mac(canonical_json(body).encode(), live.MAC_PURPOSE)
    assert isinstance(body.pop("made"), str) and isinstance(body.pop("secrets"), str)
    assert body == {"format": 3, "cellgate": versions()["cellgate"], "kind": "pause", "id": ID,
                    "notebook": str(folder.parent / "run.ipynb"), "journal": {"seq": 7, "hash": "ab" * 32},
                    "session_id": SESSION, "sandbox": {"backend": "local", "key": KEY},
                    "files": {"checkpoint.img": hashlib.sha256(b"state").hexdigest(),
                              "pages.img": hashlib.sha256(data).hexdigest()},
                    "sealed": True, "lineage": lineage}
    assert written == live.Checkpoint(folder, "pause", folder.parent / "run.ipynb", {"seq": 7, "hash": "ab" * 32},
                                      SESSION, Restore(str(folder / live.IMAGE), KEY, ID), ID,
                                      sha256_hex(canonical_json({**body, "made": signed["made"],
                                                                 "secrets": signed["secrets"]})),
                                      {"tok-1": "[secret: t]"}, lineage)
    assert live.read_checkpoint(folder) == written
    assert live.FORMAT == 3 and live.MANIFEST == "checkpoint.json" and live.IMAGE == "image"


def test_a_manifest_without_a_lineage_or_sealed_image_says_so(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    written = write(folder, kind="fork", sealed=False)
    assert "lineage" not in manifest_of(folder) and manifest_of(folder)["sealed"] is False
    assert (written.kind, written.lineage, written.restore.sealed_as) == ("fork", None, None)
    assert live.read_checkpoint(folder) == written


@pytest.mark.parametrize("sealed, sealed_as", [(True, ID), (False, None), ("true", None), (1, None), (DROP, None)])
def test_only_a_manifest_saying_sealed_true_is_unsealed_at_restore(tmp_path: Path, sealed: Any,
                                                                   sealed_as: str | None) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    resign(folder, sealed=sealed)
    assert live.read_checkpoint(folder).restore.sealed_as == sealed_as


@pytest.mark.parametrize("lineage, read", [({"id": "b" * 32}, {"id": "b" * 32}), (["b" * 32], None), ("b", None)])
def test_a_lineage_is_read_back_only_as_a_mapping(tmp_path: Path, lineage: Any, read: Any) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    resign(folder, lineage=lineage)
    assert live.read_checkpoint(folder).lineage == read


def test_a_checkpoint_names_its_record_as_a_forks_metadata_does(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    checkpoint = write(folder)
    assert checkpoint.record_of() == {"notebook": str(folder.parent / "run.ipynb"), "journal": {"seq": 7,
                                      "hash": "ab" * 32}, "checkpoint": ID, "manifest_sha256": checkpoint.digest,
                                      "session_id": SESSION}
    assert checkpoint.record_of()["journal"] is not checkpoint.journal  # a copy: the fork's metadata is its own


def test_the_version_is_cellgates_or_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    assert live._version() == versions()["cellgate"]
    monkeypatch.setattr(live, "versions", dict)
    assert live._version() == "unknown"


def test_an_image_that_is_not_a_folder_is_not_written(tmp_path: Path) -> None:
    folder = live.new_folder(tmp_path / "checkpoint")
    with pytest.raises(SessionError) as refused:
        write(folder)
    assert str(refused.value) == (f"the checkpoint's image {folder / live.IMAGE} is not a folder: No such file or "
                                  "directory; the checkpoint is not written")
    (folder / live.IMAGE).symlink_to(tmp_path)
    with pytest.raises(SessionError) as linked:
        write(folder)
    assert str(linked.value).startswith(f"the checkpoint's image {folder / live.IMAGE} is not a folder: ")
    assert not (folder / live.MANIFEST).exists()


def test_a_manifest_is_written_once(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    with pytest.raises(FileExistsError):
        write(folder)


# ----------------------------------------------------------------------------------------------- the folder
def test_a_new_folder_is_absolute_and_made_from_a_users_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    assert live.new_folder(Path("~/cp")) == tmp_path / "home" / "cp"
    monkeypatch.chdir(tmp_path)
    made = live.new_folder(Path("relative"))
    assert made == tmp_path / "relative" and made.is_absolute() and made.is_dir()


def test_a_folder_that_cannot_be_made_or_exists_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "cp"
    with pytest.raises(SessionError) as refused:
        live.new_folder(missing)
    assert str(refused.value) == f"the checkpoint folder {missing} cannot be made: No such file or directory"
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # dangling: never made through
    with pytest.raises(SessionError) as linked:
        live.new_folder(tmp_path / "link")
    assert str(linked.value) == (f"{tmp_path / 'link'} exists; a checkpoint is written only into a new folder: "
                                 "choose another path or remove that one")
    assert not (tmp_path / "elsewhere").exists()


def test_an_image_sealed_into_a_folder_that_holds_one_is_refused(tmp_path: Path) -> None:
    plain = image_folder(tmp_path, "plain") / live.IMAGE
    folder = image_folder(tmp_path)
    with pytest.raises(SessionError) as refused:
        live._seal_into(plain, folder, ID)
    assert str(refused.value) == (f"the checkpoint's image could not be sealed into {folder / live.IMAGE}: File "
                                  "exists; the checkpoint is not written")


def test_an_image_sealed_into_a_new_folder_holds_each_file_sealed(tmp_path: Path) -> None:
    plain = image_folder(tmp_path, "plain", files={"pages.img": b"memory", "checkpoint.img": b"state"}) / live.IMAGE
    folder = live.new_folder(tmp_path / "checkpoint")
    live._seal_into(plain, folder, ID)
    sealed = folder / live.IMAGE
    assert sorted(p.name for p in sealed.iterdir()) == ["checkpoint.img", "pages.img"]
    assert b"memory" not in (sealed / "pages.img").read_bytes()


# -------------------------------------------------------------------------------------------- the image's files
def test_the_image_is_at_most_256_regular_files(tmp_path: Path) -> None:
    folder = image_folder(tmp_path, files={f"{n:03}.img": b"" for n in range(live.MAX_IMAGE_FILES)})
    found = live._image_files(folder / live.IMAGE)
    assert len(found) == 256 == live.MAX_IMAGE_FILES and set(found.values()) == {hashlib.sha256(b"").hexdigest()}
    assert list(found) == sorted(found)
    (folder / live.IMAGE / "256.img").write_bytes(b"")
    with pytest.raises(SessionError) as refused:
        live._image_files(folder / live.IMAGE)
    assert str(refused.value) == "the checkpoint's image holds more than 256 files; it was altered"


@pytest.mark.parametrize("planted", ["link", "folder", "fifo"])
def test_anything_but_a_regular_file_in_the_image_is_refused(tmp_path: Path, planted: str) -> None:
    image = image_folder(tmp_path) / live.IMAGE
    target = image / "odd.img"
    if planted == "link":
        target.symlink_to(image / "pages.img")  # a link to a file of the image itself: still refused
    elif planted == "folder":
        target.mkdir()
    else:
        os.mkfifo(target)
    with pytest.raises(SessionError) as refused:
        live._image_files(image)
    assert str(refused.value) == ("the checkpoint's image holds 'odd.img', which is not a regular file; it was "
                                  "altered: make a new checkpoint")


# ------------------------------------------------------------------------------------------- read back, refused
def test_a_folder_without_a_manifest_is_not_a_checkpoint(tmp_path: Path) -> None:
    assert refusal(tmp_path) == (f"{tmp_path} is not a cellgate checkpoint (it has no checkpoint.json); give the "
                                 "folder Session.checkpoint or Session.fork made")


def test_a_checkpoint_is_found_from_a_relative_or_home_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = image_folder(tmp_path)
    written = write(folder)
    monkeypatch.chdir(tmp_path)
    assert live.read_checkpoint("checkpoint") == written
    monkeypatch.setenv("HOME", str(tmp_path))
    assert live.read_checkpoint("~/checkpoint") == written


def test_a_manifest_that_is_a_folder_or_oversize_is_refused(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    manifest = folder / live.MANIFEST
    said = f"{manifest} is not a regular file of at most 16777216 bytes; it was altered"
    text = manifest.read_text()
    manifest.write_text(text + " " * (live.MAX_MANIFEST_BYTES - len(text.encode())))  # exactly the cap: read
    assert manifest.stat().st_size == live.MAX_MANIFEST_BYTES == 16 << 20
    assert live.read_checkpoint(folder).id == ID
    manifest.write_text(text + " " * (live.MAX_MANIFEST_BYTES + 1 - len(text.encode())))
    assert refusal(folder) == said
    manifest.unlink()
    manifest.mkdir()
    assert refusal(folder) == said


@pytest.mark.parametrize("text", ["{not json", '{"format": 3}', "[1, 2]", '"mac"', '{"mac": "x", "n": NaN}',
                                  b"\xff\xfe".decode("latin-1")])
def test_a_manifest_that_is_not_json_with_a_mac_is_refused(tmp_path: Path, text: str) -> None:
    folder = image_folder(tmp_path)
    (folder / live.MANIFEST).write_text(text, encoding="latin-1")
    assert refusal(folder) == f"{folder / live.MANIFEST} is not a checkpoint manifest (not JSON with a mac); it was " \
                              "altered"


@pytest.mark.parametrize("made_as, kept", [
    (0, "the gate's secrets and the kernel's memory"),
    (1, "the gate's secrets and the kernel's memory"),
    (2, "the kernel's memory (its image)"),
])
def test_a_checkpoint_of_an_older_format_is_refused_saying_what_it_kept_in_plaintext(
        tmp_path: Path, made_as: int, kept: str) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    resign(folder, format=made_as)
    assert refusal(folder) == (f"{folder} is a checkpoint of format {made_as}, which kept {kept} in plaintext; this "
                               "cellgate reads format 3 only: it is not resumed (delete it, and pause the session "
                               "again to resume it later)")


@pytest.mark.parametrize("changes, made_by, format_said", [
    ({"format": 4}, None, "4"),
    ({"format": "3"}, None, "3"),
    ({"format": "2"}, None, "2"),  # a string is no older format
    ({"format": DROP}, None, "None"),
    ({"cellgate": "0.0.1"}, "0.0.1", "3"),
    ({"cellgate": "9" * 50}, "9" * 40, "3"),
    ({"format": "x" * 20}, None, "x" * 10),
])
def test_a_checkpoint_of_another_version_is_refused_naming_both(tmp_path: Path, changes: dict[str, Any],
                                                                made_by: str | None, format_said: str) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    resign(folder, **changes)
    this = versions()["cellgate"]
    assert refusal(folder) == (f"{folder} was made by cellgate {made_by or this} (checkpoint format {format_said}); "
                               f"this is cellgate {this}: resume it with the version that made it")


@pytest.mark.parametrize("mac", [7, None, "0" * 64, ["x"]])
def test_a_manifest_not_signed_by_this_hosts_key_is_refused(tmp_path: Path, mac: Any) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    body = manifest_of(folder)
    body["mac"] = mac
    (folder / live.MANIFEST).write_text(json.dumps(body))
    assert refusal(folder) == (f"{folder / live.MANIFEST} is not signed by this host's key: the checkpoint was made "
                               "on another host or altered, and is not resumed")


def test_a_manifest_changed_without_the_key_is_refused(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    body = manifest_of(folder)
    body["sandbox"]["key"] = "other"
    (folder / live.MANIFEST).write_text(json.dumps(body))
    assert "is not signed by this host's key" in refusal(folder)


def test_a_checkpoint_read_where_there_is_no_host_key_makes_none(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    absent = tmp_path / "keys" / "host.key"
    monkeypatch.setenv(hostkey.ENV_VAR, str(absent))
    with pytest.raises(ConfigError, match="no host key at"):
        live.read_checkpoint(folder)
    assert not absent.exists()


def test_secrets_that_do_not_open_name_the_manifest(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    resign(folder, secrets=live.seal_secrets({"a": "b"}, "fedcba9876543210"))
    assert refusal(folder) == (f"the secrets in {folder / live.MANIFEST} do not open with this host's key: the "
                               "checkpoint was made on another host or altered, and is not resumed")


@pytest.mark.parametrize("damage", ["gone", "link", "file"])
def test_a_checkpoint_without_its_image_folder_is_incomplete(tmp_path: Path, damage: str) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    image = folder / live.IMAGE
    image.rename(tmp_path / "moved")
    if damage == "link":
        image.symlink_to(tmp_path / "moved")  # the same files, through a link: refused
    elif damage == "file":
        image.write_bytes(b"")
    assert refusal(folder) == f"{image} is missing; the checkpoint is incomplete"


def test_an_image_that_differs_names_the_first_five_files_that_do(tmp_path: Path) -> None:
    folder = image_folder(tmp_path, files={f"{n}.img": bytes([n]) for n in range(8)})
    write(folder)
    image = folder / live.IMAGE
    (image / "3.img").write_bytes(b"changed")
    (image / "1.img").unlink()
    (image / "a.img").write_bytes(b"added")
    assert refusal(folder) == ("the checkpoint's image differs from what was saved (1.img, 3.img, a.img): it was "
                               "altered or cut short, and is not resumed")
    for n in (0, 2, 4, 5):
        (image / f"{n}.img").write_bytes(b"")
    assert refusal(folder) == ("the checkpoint's image differs from what was saved (0.img, 1.img, 2.img, 3.img, "
                               "4.img): it was altered or cut short, and is not resumed")


# ---------------------------------------------------------------------------------------------- the secrets
def test_sealed_secrets_open_back_bound_to_the_checkpoint(tmp_path: Path) -> None:
    known = {"tok-1": "[secret: a]", "tok-2": "[secret: b]"}
    sealed = live.seal_secrets(known, ID)
    raw = base64.b64decode(sealed)
    assert len(raw) == live.NONCE_BYTES + len(canonical_json(known)) + 16 and live.NONCE_BYTES == 12
    assert live.seal_secrets(known, ID) != sealed  # a nonce of its own each time
    assert live.open_secrets(sealed, ID, tmp_path / "m.json") == known
    said = (f"the secrets in {tmp_path / 'm.json'} do not open with this host's key: the checkpoint was made on "
            "another host or altered, and is not resumed")
    for bad, checkpoint_id in [(sealed, "fedcba9876543210"), (sealed[:-4], ID), ("", ID), (None, ID), (7, ID),
                               (base64.b64encode(raw[:12]).decode(), ID), (sealed + "!", ID)]:
        with pytest.raises(SessionError) as refused:
            live.open_secrets(bad, checkpoint_id, tmp_path / "m.json")
        assert str(refused.value) == said, bad


def test_sealed_secrets_that_are_not_a_mapping_are_refused(tmp_path: Path) -> None:
    for value in (["tok-1"], "tok-1", 7, None):
        nonce = os.urandom(live.NONCE_BYTES)
        sealed = live._sealing_key().encrypt(nonce, json.dumps(value).encode(), ID.encode())
        with pytest.raises(SessionError, match="do not open with this host's key"):
            live.open_secrets(base64.b64encode(nonce + sealed).decode(), ID, tmp_path / "m.json")
    nonce = os.urandom(live.NONCE_BYTES)
    numbers = live._sealing_key().encrypt(nonce, b'{"1": 2}', ID.encode())
    assert live.open_secrets(base64.b64encode(nonce + numbers).decode(), ID, tmp_path / "m.json") == {"1": "2"}


def test_the_sealing_key_is_the_host_keys_mac_and_never_made_at_resume(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    key = bytes.fromhex(hostkey.load().mac(b"", "cellgate-checkpoint-secrets"))
    nonce = os.urandom(live.NONCE_BYTES)
    assert live._sealing_key().decrypt(nonce, live._sealing_key().encrypt(nonce, b"x", None), None) == b"x"
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    assert AESGCM(key).decrypt(nonce, live._sealing_key().encrypt(nonce, b"x", None), None) == b"x"
    assert live.SECRETS_PURPOSE == "cellgate-checkpoint-secrets" and live.MAC_PURPOSE == "cellgate-checkpoint"
    sealed = live.seal_secrets({"a": "b"}, ID)
    absent = tmp_path / "keys" / "host.key"
    monkeypatch.setenv(hostkey.ENV_VAR, str(absent))
    with pytest.raises(SessionError, match="do not open with this host's key"):  # no key: none is made for it
        live.open_secrets(sealed, ID, tmp_path / "m.json")
    assert not absent.exists()
    with pytest.raises(ConfigError, match="no host key at"):
        live._sealing_key(create=False)
    assert not absent.exists()
    live.seal_secrets({"a": "b"}, ID)  # a checkpoint made: the key is made if need be, as a record's is
    assert absent.exists()


# ------------------------------------------------------------------------------------------ needs a live kernel
def test_a_session_that_cannot_checkpoint_is_refused_naming_its_backend() -> None:
    session: Any = SimpleNamespace(can_checkpoint=False, provisioner=SimpleNamespace(
        started=SimpleNamespace(backend=SimpleNamespace(name="kubernetes"))))
    with pytest.raises(SessionError) as refused:
        live.require_checkpoints(session)
    assert str(refused.value) == ("this session's kernel cannot be checkpointed: its sandbox backend (kubernetes) "
                                  "cannot checkpoint a live kernel, or it has none running; pause, resume and fork "
                                  "need the local gVisor backend, as root")
    live.require_checkpoints(SimpleNamespace(can_checkpoint=True))  # type: ignore[arg-type]


def stub_session(*, dead: bool = False, can_checkpoint: bool = False) -> Any:
    """What ``pause`` and ``fork`` read of a session before they touch its sandbox (``live.Live``)."""
    return SimpleNamespace(dead=dead, can_checkpoint=can_checkpoint, provisioner=SimpleNamespace(
        started=SimpleNamespace(backend=SimpleNamespace(name="kubernetes"))))


@pytest.mark.parametrize("count", [0, -1, 101])
def test_a_fork_count_out_of_range_is_refused_first(count: int) -> None:
    """Not measured by scripts/mutation (``fork`` drives a live sandbox past these checks): its refusals before it."""
    with pytest.raises(ConfigError) as refused:
        asyncio.run(live.fork(stub_session(dead=True), count, None))
    assert str(refused.value) == f"fork count {count} is not between 1 and 100; fork into fewer sessions"


@pytest.mark.parametrize("count", [1, 100, None])
def test_a_stopped_kernel_or_one_that_cannot_checkpoint_is_not_forked_and_no_folder_is_made(
        tmp_path: Path, count: int | None) -> None:
    with pytest.raises(SessionError, match="^the session's kernel is stopped; restart it before forking$"):
        asyncio.run(live.fork(stub_session(dead=True), count, tmp_path / "kept"))
    with pytest.raises(SessionError, match="^this session's kernel cannot be checkpointed: its sandbox backend "):
        asyncio.run(live.fork(stub_session(), count, tmp_path / "kept"))
    with pytest.raises(SessionError, match="^this session's kernel cannot be checkpointed: its sandbox backend "):
        asyncio.run(live.pause(stub_session(), tmp_path / "paused"))
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------------------------------------- fork names
def test_a_forks_name_is_its_roots_with_the_first_free_number(tmp_path: Path) -> None:
    run = tmp_path / "run.ipynb"
    assert live.fork_path(run, ".ipynb") == tmp_path / "run.fork-1.ipynb"
    assert live.fork_path(tmp_path / "run.fork-2.ipynb", ".ipynb") == tmp_path / "run.fork-1.ipynb"
    assert live.fork_path(tmp_path / "a.fork-1.fork-12.ipynb", ".checkpoint") == tmp_path / "a.fork-1.checkpoint"
    assert live.fork_path(tmp_path / "run.fork-x.ipynb", ".ipynb") == tmp_path / "run.fork-x.fork-1.ipynb"
    assert live.fork_path(tmp_path / "run.fork-.ipynb", ".ipynb") == tmp_path / "run.fork-.fork-1.ipynb"
    assert live.fork_path(tmp_path / "fork-3.ipynb", ".ipynb") == tmp_path / "fork-3.fork-1.ipynb"
    assert live.fork_path(tmp_path / "2026.ipynb", ".ipynb") == tmp_path / "2026.fork-1.ipynb"  # digits, no .fork-
    assert live.fork_path(run, ".ipynb", 3) == tmp_path / "run.fork-3.ipynb"
    (tmp_path / "run.fork-1.ipynb").write_text("{}")  # a notebook
    (tmp_path / "run.fork-2.journal.jsonl").write_text("")  # a journal alone
    (tmp_path / "run.fork-3.blobs").mkdir()  # a blob folder alone
    (tmp_path / "run.fork-4.ipynb").symlink_to(tmp_path / "nowhere")  # a dangling link
    (tmp_path / "run.fork-5.checkpoint").symlink_to(tmp_path / "nowhere")  # taken only for a checkpoint's name
    (tmp_path / "run.fork-6.checkpoint").mkdir()
    assert live.fork_path(run, ".ipynb") == tmp_path / "run.fork-5.ipynb"
    assert live.fork_path(run, ".ipynb", 2) == tmp_path / "run.fork-6.ipynb"
    assert live.fork_path(run, ".checkpoint") == tmp_path / "run.fork-7.checkpoint"
    assert live.fork_path(run, ".checkpoint", 2) == tmp_path / "run.fork-8.checkpoint"


def test_fork_numbers_go_up_to_fork_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert live.FORK_NAMES == 10_000
    monkeypatch.setattr(live, "FORK_NAMES", 5)  # the bound, not its size: 10,000 names take seconds to walk
    for n in range(1, 5):
        (tmp_path / f"run.fork-{n}.ipynb").touch()
    assert live.fork_path(tmp_path / "run.ipynb", ".ipynb") == tmp_path / "run.fork-5.ipynb"
    with pytest.raises(SessionError):
        live.fork_path(tmp_path / "run.ipynb", ".ipynb", 2)
    (tmp_path / "run.fork-5.ipynb").touch()
    with pytest.raises(SessionError) as refused:
        live.fork_path(tmp_path / "run.fork-3.ipynb", ".ipynb")
    assert str(refused.value) == f"{tmp_path} holds 5 forks of run.ipynb already; move some away"


# ------------------------------------------------------------------------------------------ a fork's options
def test_a_forks_options_are_its_parents_restored_with_its_own_notebook_and_budget(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    lineage = Lineage.new()
    checkpoint = write(folder, lineage=lineage.record(), secrets={"tok-9": "[secret: x]"})
    parent = LaunchOptions(metadata={"team": "a"}, tools=("t",))
    options = live.fork_options(checkpoint, parent, 2, 3)
    assert options.restore == checkpoint.restore and options.tools == ("t",)
    assert options.notebook == tmp_path / "run.fork-2.ipynb"
    assert dict(options.metadata) == {"team": "a", "forked_from": {**checkpoint.record_of(), "fork": 2, "of": 3,
                                                                  "budget": {"lineage": lineage.id}}}
    factory = options.gate_factory
    assert isinstance(factory, live.KnownSecrets)
    assert (factory.factory, factory.secrets, factory.lineage) == (Dispatcher, {"tok-9": "[secret: x]"}, lineage)

    share = Lineage(lineage.id, ("c" * 32,))
    given = live.fork_options(checkpoint, parent, 1, None, share, {"lineage": lineage.id, "share": 4})
    assert dict(given.metadata)["forked_from"]["budget"] == {"lineage": lineage.id, "share": 4}
    assert dict(given.metadata)["forked_from"]["of"] is None
    assert isinstance(given.gate_factory, live.KnownSecrets) and given.gate_factory.lineage == share
    assert live.fork_options(checkpoint, parent, 1, None, share).metadata["forked_from"]["budget"] == \
        {"lineage": lineage.id}


def test_a_fork_of_a_checkpoint_without_a_lineage_has_no_budget(tmp_path: Path) -> None:
    checkpoint = write(image_folder(tmp_path))
    options = live.fork_options(checkpoint, LaunchOptions(), 1, 1)
    assert "budget" not in options.metadata["forked_from"]
    assert isinstance(options.gate_factory, live.KnownSecrets) and options.gate_factory.lineage is None


def test_known_secrets_give_the_forks_gate_the_parents_secrets_and_lineage() -> None:
    lineage = Lineage.new()
    policy = Policy.model_validate({"default": "deny"})
    approver = DenyApprover()
    log: Any = SimpleNamespace()
    registry = ToolRegistry([])
    made = live.KnownSecrets(Dispatcher, {"tok-9": "[secret: x]"}, lineage)(
        registry, log=log, policy=policy, approver=approver, session_id="f" * 32, call_timeout=4.5)
    assert (made.policy, made.session_id, made.call_timeout, made.lineage) == (policy, "f" * 32, 4.5, lineage)
    assert made.log is log and made.registry is registry
    assert made.approvals.approver is approver
    assert made.secrets.known() == {"tok-9": "[secret: x]"}
    own = live.KnownSecrets(Dispatcher, {})(ToolRegistry([]), log=None, policy=policy,  # type: ignore[arg-type]
                                            approver=approver, session_id="", call_timeout=1.0)
    assert own.lineage != lineage and own.secrets.known() == {}


# ---------------------------------------------------------------------------------------- a pause resumed
SETUP = {"tools": {"manifest": [{"name": "small"}], "manifest_sha256": "t1"}, "policy": {"sha256": "p1"},
         "sandbox": {"memory_mb": 512}}


def paused(tmp_path: Path, calls: int = 2) -> tuple[Path, live.Checkpoint]:
    """A record whose cell made ``calls`` calls, ended as a pause, and its checkpoint's manifest."""
    notebook = tmp_path / "run.ipynb"
    recorder = Recorder(notebook, SETUP)
    tools = [Tool("small", "", {"type": "object", "properties": {}}, lambda: 3)]
    gate = Dispatcher(ToolRegistry(tools), log=recorder, policy=Policy.model_validate({"default": "allow"}))
    cell = recorder.cell_sent("m1", "tools.small()", False)
    scope = CallScope(cell=cell, msg_id="m1", key="m1", source="tools.small()")
    for n in range(calls):
        asyncio.run(gate.serve(CallRequest(id=f"c{n}", tool="small", args={}, cell="m1"), scope))
    recorder.cell_ended(cell, "ok", [], None)
    recorder.close("session-paused", checkpoint=ID)
    checkpoint = write(image_folder(tmp_path), seq=recorder.journal.seq, head=recorder.journal.head,
                       notebook=notebook, lineage=Lineage.new().record())
    return notebook, checkpoint


def test_a_paused_record_resumes_its_notebook_and_gate(tmp_path: Path) -> None:
    notebook, checkpoint = paused(tmp_path)
    caller = LaunchOptions(notebook=tmp_path / "elsewhere.ipynb", tools=("t",))
    options = live.resume_options(checkpoint.path, caller)
    assert (options.restore, options.notebook, options.tools) == (checkpoint.restore, None, ("t",))
    continuation = options.recorder_factory.__self__  # type: ignore[attr-defined]
    assert isinstance(continuation, live.Continuation) and continuation.options is caller
    assert options.gate_factory == continuation.gate and continuation.checkpoint == checkpoint
    assert continuation.previous.notebook == notebook

    opened: list[Path] = []

    def open_journal(path: Path) -> Journal:
        opened.append(path)
        return Journal(path)
    recorder = options.recorder_factory(tmp_path / "ignored.ipynb", SETUP, open_journal)
    try:
        assert opened == [tmp_path / "run.journal.jsonl"]  # the session's journal factory, on the paused journal
        assert recorder.notebook_path == notebook
        last = json.loads((tmp_path / "run.journal.jsonl").read_text().splitlines()[-1])
        assert (last["event"], last["checkpoint"]) == ("session-resumed", ID)
        assert last["seq"] == checkpoint.journal["seq"] + 1
        assert json.loads(notebook.read_text())["metadata"]["cellgate"]["journal"]["seq"] == last["seq"]
    finally:
        recorder.close()
    assert not (tmp_path / "ignored.ipynb").exists()

    policy, approver = Policy.model_validate({"default": "deny"}), DenyApprover()
    gate = options.gate_factory(ToolRegistry([]), log=recorder, policy=policy, approver=approver, session_id="new",
                                call_timeout=2.0)
    assert (gate.log, gate.policy, gate.approvals.approver, gate.call_timeout) == (recorder, policy, approver, 2.0)
    assert gate.session_id == SESSION  # the paused session's, not the new process's
    assert (gate.counters.session, gate.counters.per_tool) == (2, {"small": 2})
    assert next(gate._seq) == 3  # calls numbered on
    assert gate.secrets.known() == {"tok-1": "[secret: t]"}
    assert gate.lineage == Lineage.from_record(checkpoint.lineage)
    assert gate.lineage.held() == {"session": 2, "tool:small": 2}


def test_a_fork_of_a_resumed_session_records_as_a_fork_not_as_the_paused_record(tmp_path: Path) -> None:
    _, checkpoint = paused(tmp_path)

    def caller_gate(*args: Any, **kwargs: Any) -> Dispatcher:
        return Dispatcher(*args, **kwargs)
    caller = LaunchOptions(gate_factory=caller_gate, metadata={"team": "a"})
    resumed = live.resume_options(checkpoint.path, caller)
    fork_checkpoint = write(image_folder(tmp_path, "fork-checkpoint"), kind="fork")
    options = live.fork_options(fork_checkpoint, resumed, 1, 1)
    assert options.recorder_factory is Recorder  # the caller's, not the resumed record's continuation
    assert isinstance(options.gate_factory, live.KnownSecrets) and options.gate_factory.factory is caller_gate
    assert options.metadata["team"] == "a" and options.restore == fork_checkpoint.restore


def test_a_resume_under_another_setup_is_refused_naming_what_changed(tmp_path: Path) -> None:
    _, checkpoint = paused(tmp_path)
    options = live.resume_options(checkpoint.path, LaunchOptions())
    with pytest.raises(ConfigError) as refused:
        options.recorder_factory(tmp_path / "x.ipynb", {**SETUP, "policy": {"sha256": "p2"}})
    assert str(refused.value) == (f"the session of {checkpoint.path} was made with other policy.sha256; resume it "
                                  "with the tools, policy and sandbox settings it was made with")
    with pytest.raises(ConfigError) as two:
        options.recorder_factory(tmp_path / "x.ipynb", {**SETUP, "policy": {"sha256": "p2"},
                                                        "sandbox": {"memory_mb": 256}})
    assert "was made with other policy.sha256, sandbox (memory_mb: 512 -> 256); resume it" in str(two.value)


def test_a_forks_checkpoint_is_not_resumed(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    write(folder, kind="fork")
    with pytest.raises(SessionError) as refused:
        live.resume_options(folder, LaunchOptions())
    assert str(refused.value) == (f"{folder} is a fork's checkpoint; its forks were started by Session.fork, and it "
                                  "is not resumed as a session of its own")


def test_a_checkpoint_whose_record_is_gone_is_not_resumed(tmp_path: Path) -> None:
    folder = image_folder(tmp_path)
    write(folder)
    with pytest.raises(SessionError) as refused:
        live.resume_options(folder, LaunchOptions())
    assert str(refused.value).startswith(f"the record of the checkpoint {folder} cannot be continued: "
                                         f"{tmp_path / 'run.journal.jsonl'} cannot be read: ")


@pytest.mark.parametrize("position", ["seq", "hash"])
def test_a_checkpoint_resumed_already_is_refused(tmp_path: Path, position: str) -> None:
    notebook, checkpoint = paused(tmp_path)
    seq, head = checkpoint.journal["seq"], checkpoint.journal["hash"]
    if position == "seq":
        resign(checkpoint.path, journal={"seq": seq - 1, "hash": head})
        said_at = seq - 1
    else:
        resign(checkpoint.path, journal={"seq": seq, "hash": "0" * 64})
        said_at = seq
    with pytest.raises(SessionError) as refused:
        live.resume_options(checkpoint.path, LaunchOptions())
    assert str(refused.value) == (f"{notebook}'s journal goes on past this checkpoint (it ends at record {seq}, the "
                                  f"checkpoint at {said_at}): it was resumed already; a checkpoint is resumed once")


def test_a_resumed_gate_counts_the_budgets_used_before_the_pause(tmp_path: Path) -> None:
    checkpoint = write(image_folder(tmp_path))  # made before lineages: the gate keeps its own
    records = [
        {"event": "session-started", "metadata": {}},
        {"event": "call-finished", "call": {"tool": "a", "counters": {"session": 2, "tool_session": 2}}},
        {"event": "call-finished", "call": {"tool": "b", "counters": {"session": 3, "tool_session": 1}}},
        {"event": "call-finished", "call": {"tool": "a", "counters": {"session": 1, "tool_session": 1}}},
        {"event": "call-finished", "call": {"tool": "c", "counters": {}}},
        {"event": "call-finished", "call": {"tool": "d", "counters": "not counters"}},
        {"event": "call-finished", "call": {"tool": "e"}},
        {"event": "call-started", "call": {"seq": 5, "tool": "a", "counters": {"session": 99, "tool_session": 99}}},
        {"event": "output"},
        {"event": "call-finished"},
    ]
    continuation = live.Continuation(Previous(tmp_path / "run.ipynb", records), checkpoint, LaunchOptions())
    log: Any = None
    gate = continuation.gate(ToolRegistry([]), log=log, policy=Policy.model_validate({"default": "allow"}),
                             approver=DenyApprover(), session_id="new", call_timeout=2.0)
    assert (gate.counters.session, gate.counters.per_tool) == (3, {"a": 2, "b": 1, "c": 0})
    assert next(gate._seq) == 6 and gate.call_timeout == 2.0
    assert gate.lineage.held() == {"session": 3, "tool:a": 2, "tool:b": 1, "tool:c": 0}
    only_tool = [{"event": "call-finished", "call": {"tool": "a", "counters": {"tool_session": 1}}}]
    gate = live.Continuation(Previous(tmp_path / "run.ipynb", only_tool), checkpoint, LaunchOptions()).gate(
        ToolRegistry([]), log=log, policy=Policy.model_validate({"default": "allow"}), approver=DenyApprover(),
        session_id="new", call_timeout=2.0)
    assert (gate.counters.session, gate.counters.per_tool) == (0, {"a": 1})
