"""Live sessions: a session's kernel paused into a checkpoint and resumed (in this process or another), or forked.

A checkpoint is a folder the host makes, its user's alone (0700, its manifest 0600)::

    checkpoint.json   what it is: the session, where its record stood, the sandbox configuration it needs, the
                      sha256 of every file of the image, all under a MAC of this host's key; and what the gate
                      knew as secret, sealed (AES-GCM under a key derived from the host key: never in plaintext)
    image/            the sandbox's memory and state, as the backend saved it (``SandboxBackend.checkpoint``),
                      sealed file by file (``sealed_image``): the backend writes it into the host's private run
                      root and is handed it back there, unsealed, only for a restore

The kernel lets go of its sockets first (``cellgate.kernel.hibernate``); the
backend saves its sandbox. A **pause** (``Session.checkpoint``) stops the
sandbox and ends the record with ``session-paused``; ``Session.resume`` reads
the checkpoint back (MAC, version, every file's digest, before the backend
reads a byte of it), continues the same notebook with ``session-resumed`` and
restores the kernel in a new sandbox, its gate numbering calls on and its
budgets counted from the record. A **fork** (``Session.fork``) saves the
sandbox and leaves it running: the parent records ``session-forked`` and goes
on, and each fork is a new session restored from the same image, with its own
sandbox, gate and notebook, whose metadata names the parent's notebook, where
its journal stood and the fork's number. A fork's budgets are its parent's
(``calls.lineage``: the same ledger, or a smaller share of it), and the
manifest names that lineage, so a resumed session draws on it too; approvals
never carry over.

A fork's checkpoint is a means, not a result: it is made in the host's private run root, in plaintext, and
``Session.fork`` (and so ``Session.trial``) deletes it once its forks are restored or failed,
``Pool.from_session``'s goes when the pool closes; only one in a folder the caller named (``path=``) stays, sealed
like every pause's (which is what ``Session.resume`` reads).

A checkpoint holds the kernel's memory: what the program computed (a value a
tool marked ``Secret`` included: the sandbox got it), never a credential of the
host's (none enters the sandbox). Tools, policy and settings are the
caller's again at resume, never the checkpoint's: a resume under another
setup is refused with what changed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import os
import secrets
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import ConfigError, SessionError
from cellgate.gate._guarded import Folder, remove_tree_quietly
from cellgate.gate._json import canonical_json, sha256_hex, utcnow
from cellgate.gate._versions import versions
from cellgate.gate.audit.journal import Journal
from cellgate.gate.audit.record_paths import existing_parts
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.audit.resume import Previous, read_previous, setup_changes
from cellgate.gate.calls.approval import Approver
from cellgate.gate.calls.dispatch import CallLog, Dispatcher
from cellgate.gate.calls.lineage import Lineage
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.sandbox.backend import Restore
from cellgate.gate.session import sealed_image
from cellgate.gate.session.launch import GateFactory, LaunchOptions

if TYPE_CHECKING:
    from cellgate.gate.session.provisioner import GVisorProvisioner


class Live(Protocol):
    """What of a ``Session`` this module reads (a protocol: the session imports this module, not the reverse)."""

    dead: bool

    @property
    def provisioner(self) -> GVisorProvisioner: ...

    @property
    def recorder(self) -> Recorder: ...

    @property
    def can_checkpoint(self) -> bool: ...

    @property
    def launch_options(self) -> LaunchOptions: ...

    async def shutdown(self) -> None: ...

FORMAT = 3  # 3: the image sealed too; 2: the gate's secrets sealed; 1: neither (1 and 2 are refused)
MANIFEST = "checkpoint.json"
IMAGE = "image"
MAC_PURPOSE = "cellgate-checkpoint"
SECRETS_PURPOSE = "cellgate-checkpoint-secrets"  # the host key's MAC of it is the key that seals them
NONCE_BYTES = 12
MAX_MANIFEST_BYTES = 16 << 20
MAX_IMAGE_FILES = 256
MAX_FORKS = 100
Kind = Literal["pause", "fork"]


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint read back and verified (``read_checkpoint``)."""

    path: Path
    kind: Kind
    notebook: Path  # the record of the session it was taken from
    journal: dict[str, Any]  # where that record stood: {"seq", "hash"}
    session_id: str
    restore: Restore
    id: str  # how the records name it
    digest: str  # of its manifest
    secrets: dict[str, str]  # what the session's gate knew as secret (form -> marker): its kernel may hold them
    lineage: dict[str, Any] | None = None  # the budgets it draws on (``Lineage.record``); None: made before lineages
    # A kept fork's image in plaintext, in the run root, that its forks restore from (``discard`` removes it).
    plain_image: Path | None = None
    kept: bool = True  # False: the folder is the run root's, deleted by ``discard``

    def record_of(self) -> dict[str, Any]:
        """How a fork's metadata names its parent."""
        return {"notebook": str(self.notebook), "journal": dict(self.journal), "checkpoint": self.id,
                "manifest_sha256": self.digest, "session_id": self.session_id}


def _version() -> str:
    return versions().get("cellgate", "unknown")


def new_folder(path: Path) -> Path:
    """The checkpoint's folder, made now and this user's alone; an existing path is never written into."""
    path = path.expanduser().absolute()
    try:
        path.mkdir(mode=0o700)
        with Folder.open(path) as made:  # 0700 whatever the umask, through its descriptor (a link is refused)
            os.fchmod(made.fd, 0o700)
    except FileExistsError:
        raise SessionError(f"{path} exists; a checkpoint is written only into a new folder: choose another path "
                           "or remove that one") from None
    except OSError as exc:
        raise SessionError(f"the checkpoint folder {path} cannot be made: {exc.strerror or exc}") from None
    return path


def discard(checkpoint: Checkpoint) -> None:
    """A fork's checkpoint no session will start from again (its forks are restored, its pool closed): its
    plaintext goes, and the folder too unless the caller named it (``kept``, sealed). Nothing in it is followed."""
    if checkpoint.plain_image is not None:
        sealed_image.release(checkpoint.plain_image)
    if not checkpoint.kept:
        remove_tree_quietly(checkpoint.path)


def _sealing_key(create: bool = True) -> AESGCM:
    return AESGCM(bytes.fromhex(hostkey.load(create=create).mac(b"", SECRETS_PURPOSE)))


def seal_secrets(known: dict[str, str], checkpoint_id: str) -> str:
    """The gate's known secrets (form -> marker) as the manifest holds them: AES-GCM under a key only this host's
    key gives, bound to the checkpoint's id; base64 of nonce and ciphertext."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    sealed = _sealing_key().encrypt(nonce, canonical_json(known).encode(), checkpoint_id.encode())
    return base64.b64encode(nonce + sealed).decode()


def open_secrets(sealed: object, checkpoint_id: str, manifest: Path) -> dict[str, str]:
    """``seal_secrets`` undone: SessionError when they were sealed under another key or altered."""
    try:
        raw = base64.b64decode(str(sealed), validate=True)
        nonce, sealed_text = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        known = json.loads(_sealing_key(create=False).decrypt(nonce, sealed_text, checkpoint_id.encode()))
    except (binascii.Error, ValueError, InvalidTag):
        known = None
    if not isinstance(known, dict):
        raise SessionError(f"the secrets in {manifest} do not open with this host's key: the checkpoint was made "
                           "on another host or altered, and is not resumed")
    return {str(k): str(v) for k, v in known.items()}


def _image_files(image: Path) -> dict[str, str]:
    """sha256 of every file of an image folder (flat, regular files only; anything else is refused)."""
    found: dict[str, str] = {}
    for entry in sorted(os.scandir(image), key=lambda e: e.name):
        info = entry.stat(follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            raise SessionError(f"the checkpoint's image holds {entry.name!r}, which is not a regular file; "
                               "it was altered: make a new checkpoint")
        if len(found) >= MAX_IMAGE_FILES:
            raise SessionError(f"the checkpoint's image holds more than {MAX_IMAGE_FILES} files; it was altered")
        digest = hashlib.sha256()
        with open(entry.path, "rb") as file:
            while chunk := file.read(4 << 20):
                digest.update(chunk)
        found[entry.name] = digest.hexdigest()
    return found


def write_manifest(folder: Path, kind: Kind, checkpoint_id: str, *, notebook: Path, journal: Journal,
                   session_id: str, backend: str, key: str, secrets: dict[str, str],
                   lineage: dict[str, Any] | None = None, sealed: bool = True) -> Checkpoint:
    """The manifest of the checkpoint in ``folder`` (``new_folder``'s, its ``image`` saved: ``sealed`` by
    ``sealed_image.seal``, or in plaintext in the run root), written once."""
    try:  # runsc made the image folder (0755): the checkpoint's user's alone too, through its descriptor
        with Folder.open(folder) as made, made.child(IMAGE) as image:
            os.fchmod(image.fd, 0o700)
    except OSError as exc:
        raise SessionError(f"the checkpoint's image {folder / IMAGE} is not a folder: {exc.strerror or exc}; "
                           "the checkpoint is not written") from None
    body: dict[str, Any] = {
        "secrets": seal_secrets(secrets, checkpoint_id),
        "format": FORMAT, "cellgate": _version(), "kind": kind, "id": checkpoint_id, "made": utcnow(),
        "notebook": str(notebook),
        "journal": {"seq": journal.seq, "hash": journal.head}, "session_id": session_id,
        "sandbox": {"backend": backend, "key": key}, "files": _image_files(folder / IMAGE), "sealed": sealed,
    }
    if lineage is not None:
        body["lineage"] = lineage
    text = canonical_json(body)
    signed = {**body, "mac": hostkey.load().mac(text.encode(), MAC_PURPOSE)}
    with Folder.open(folder) as made:  # a new file (O_EXCL, no link followed), 0600 through its descriptor
        made.write_new(MANIFEST, json.dumps(signed, indent=1).encode(), mode=0o600)
    return _checkpoint(folder, body, sha256_hex(text), dict(secrets))


def read_checkpoint(path: str | Path) -> Checkpoint:
    """A checkpoint this host made, checked whole before anything reads its image: SessionError saying what is
    wrong (not a checkpoint, another version's, another host's, altered or cut short)."""
    folder = Path(path).expanduser().absolute()
    manifest = folder / MANIFEST
    try:
        info = os.lstat(manifest)
    except OSError:
        raise SessionError(f"{folder} is not a cellgate checkpoint (it has no {MANIFEST}); give the folder "
                           "Session.checkpoint or Session.fork made") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MANIFEST_BYTES:
        raise SessionError(f"{manifest} is not a regular file of at most {MAX_MANIFEST_BYTES} bytes; it was altered")
    try:
        signed = json.loads(manifest.read_bytes())
        mac = signed.pop("mac")
        text = canonical_json(signed)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SessionError(f"{manifest} is not a checkpoint manifest (not JSON with a mac); it was altered") from None
    made_as = signed.get("format")
    if isinstance(made_as, int) and made_as < FORMAT:
        what = "the gate's secrets and the kernel's memory" if made_as < 2 else "the kernel's memory (its image)"
        raise SessionError(f"{folder} is a checkpoint of format {made_as}, which kept {what} in plaintext; this "
                           f"cellgate reads format {FORMAT} only: it is not resumed (delete it, and pause the "
                           "session again to resume it later)")
    if signed.get("format") != FORMAT or signed.get("cellgate") != _version():
        raise SessionError(f"{folder} was made by cellgate {str(signed.get('cellgate'))[:40]} (checkpoint format "
                           f"{str(signed.get('format'))[:10]}); this is cellgate {_version()}: resume it with the "
                           "version that made it")
    if not isinstance(mac, str) or not hostkey.load(create=False).check(text.encode(), MAC_PURPOSE, mac):
        raise SessionError(f"{manifest} is not signed by this host's key: the checkpoint was made on another host "
                           "or altered, and is not resumed")
    image = folder / IMAGE
    if not image.is_dir() or image.is_symlink():
        raise SessionError(f"{image} is missing; the checkpoint is incomplete")
    found = _image_files(image)
    expected = signed["files"]
    if found != expected:
        bad = sorted(name for name in {*found, *expected} if found.get(name) != expected.get(name))
        raise SessionError(f"the checkpoint's image differs from what was saved ({', '.join(bad[:5])}): it was "
                           "altered or cut short, and is not resumed")
    return _checkpoint(folder, signed, sha256_hex(text), open_secrets(signed.get("secrets"), str(signed["id"]),
                                                                    manifest))


def _checkpoint(folder: Path, body: dict[str, Any], digest: str, known: dict[str, str]) -> Checkpoint:
    sandbox, checkpoint_id = body["sandbox"], str(body["id"])
    sealed_as = checkpoint_id if body.get("sealed") is True else None
    return Checkpoint(folder, body["kind"], Path(body["notebook"]), dict(body["journal"]), str(body["session_id"]),
                      Restore(str(folder / IMAGE), str(sandbox["key"]), sealed_as), checkpoint_id, digest, known,
                      body.get("lineage") if isinstance(body.get("lineage"), dict) else None)


# --------------------------------------------------------------------------------------------------- the session
async def _save(session: Live, folder: Path, leave_running: bool) -> tuple[str, str]:
    """Pause the session's kernel and save its sandbox into ``folder`` (the run root's: the image is plaintext);
    returns (backend, configuration key)."""
    provisioner = session.provisioner
    started, handle = provisioner.started, provisioner.handle
    assert handle is not None  # checked by require_checkpoints
    try:
        await asyncio.to_thread(started.service.pause_kernel, leave_running)  # refused while a cell runs
    except BaseException:
        remove_tree_quietly(folder)  # runsc wrote into it: nothing there is followed
        raise
    try:
        made = await asyncio.to_thread(started.backend.checkpoint, handle, folder / IMAGE, leave_running)
    except BaseException:
        # The kernel took up its sockets again, or its sandbox ended with the checkpoint: restart() it then.
        session.dead = await asyncio.to_thread(started.service.pause_failed) or session.dead
        remove_tree_quietly(folder)  # runsc wrote into it: nothing there is followed
        raise
    if leave_running:
        await asyncio.to_thread(started.service.reconnect_kernel)
    return made.backend, made.key


def require_checkpoints(session: Live) -> None:
    """SessionError unless the session's kernel can be checkpointed now (before any folder is made)."""
    if not session.can_checkpoint:
        backend = session.provisioner.started.backend.name
        raise SessionError(f"this session's kernel cannot be checkpointed: its sandbox backend ({backend}) cannot "
                           "checkpoint a live kernel, or it has none running; pause, resume and fork need the local "
                           "gVisor backend, as root")


async def pause(session: Live, path: str | Path | None) -> Checkpoint:
    """``Session.checkpoint``: the kernel saved, its sandbox stopped, the record ended as ``session-paused``."""
    require_checkpoints(session)
    recorder = session.recorder
    notebook = recorder.notebook_path
    folder = new_folder(Path(path) if path is not None else notebook.with_name(notebook.stem + ".checkpoint"))
    work = sealed_image.work_folder()
    try:
        backend, key = await _save(session, work, leave_running=False)
        known, lineage = session.provisioner.gate.secrets.known(), session.provisioner.gate.lineage.record()
        session_id, checkpoint_id = session.provisioner.started.session_id, secrets.token_hex(8)
        await asyncio.to_thread(_seal_into, work / IMAGE, folder, checkpoint_id)
    except BaseException:
        remove_tree_quietly(folder)
        raise
    finally:
        remove_tree_quietly(work)  # the plaintext never stays
    session.provisioner.ending = ("session-paused", {"checkpoint": checkpoint_id})
    await session.shutdown()
    return write_manifest(folder, "pause", checkpoint_id, notebook=notebook, journal=recorder.journal,
                          session_id=session_id, backend=backend, key=key, secrets=known, lineage=lineage)


def _seal_into(plain: Path, folder: Path, checkpoint_id: str) -> None:
    try:
        sealed_image.seal(plain, folder / IMAGE, checkpoint_id)
    except OSError as exc:
        raise SessionError(f"the checkpoint's image could not be sealed into {folder / IMAGE}: "
                           f"{exc.strerror or exc}; the checkpoint is not written") from None


async def fork(session: Live, count: int | None, path: str | Path | None) -> Checkpoint:
    """``Session.fork`` and ``Pool.from_session``: the kernel saved and left running, the parent's record saying
    so (``count`` forks, or a pool's as many as it needs: None); sessions start from it with ``fork_options``.
    The caller ``discard``s it when no session will start from it again, unless ``path`` named its folder."""
    if count is not None and not 1 <= count <= MAX_FORKS:
        raise ConfigError(f"fork count {count!r} is not between 1 and {MAX_FORKS}; fork into fewer sessions")
    if session.dead:
        raise SessionError("the session's kernel is stopped; restart it before forking")
    require_checkpoints(session)
    recorder = session.recorder
    notebook = recorder.notebook_path
    kept = new_folder(Path(path)) if path is not None else None
    work = sealed_image.work_folder()  # nobody keeps it: the run root's, never a folder beside the record
    checkpoint_id = secrets.token_hex(8)
    try:
        backend, key = await _save(session, work, leave_running=True)
        if kept is not None:
            await asyncio.to_thread(_seal_into, work / IMAGE, kept, checkpoint_id)
    except BaseException:
        remove_tree_quietly(work)
        if kept is not None:
            remove_tree_quietly(kept)
        raise
    recorder.event("session-forked", forks=count, checkpoint=checkpoint_id, sync=True)
    recorder.write_notebook()
    made = write_manifest(kept or work, "fork", checkpoint_id, notebook=notebook, journal=recorder.journal,
                          session_id=session.provisioner.started.session_id, backend=backend, key=key,
                          secrets=session.provisioner.gate.secrets.known(),
                          lineage=session.provisioner.gate.lineage.record(), sealed=kept is not None)
    # Its forks restore from the plaintext in the run root (never unsealed again); ``discard`` removes it.
    return replace(made, restore=replace(made.restore, image=str(work / IMAGE), sealed_as=None),
                   plain_image=work / IMAGE if kept is not None else None, kept=kept is not None)


FORK_NAMES = 10_000  # fork numbers tried per root notebook, at most


def fork_path(notebook: Path, suffix: str, number: int = 1) -> Path:
    """Where fork ``number`` of a fork of ``notebook`` goes: ``ROOT.fork-N`` + ``suffix`` beside it, ROOT its stem
    without any ``.fork-K`` (a fork of ``run.fork-2`` is ``run.fork-3``, never ``run.fork-2.fork-1``), N the
    ``number``-th number whose notebook (and, for a checkpoint folder, that folder) is free: forks named together
    before any has a record get numbers of their own."""
    root = notebook.stem
    while (cut := root.rpartition(".fork-"))[1] and cut[2].isdigit():
        root = cut[0]
    free = 0
    for n in range(1, FORK_NAMES + 1):
        candidate = notebook.with_name(f"{root}.fork-{n}{suffix}")
        if existing_parts(notebook.with_name(f"{root}.fork-{n}.ipynb")) or candidate.is_symlink() or candidate.exists():
            continue
        free += 1
        if free == number:
            return candidate
    raise SessionError(f"{notebook.parent} holds {FORK_NAMES} forks of {root}.ipynb already; move some away")


def fork_options(checkpoint: Checkpoint, parent: LaunchOptions, number: int, of: int | None,
                 lineage: Lineage | None = None, budget: dict[str, Any] | None = None) -> LaunchOptions:
    """The launch options of fork ``number`` of ``checkpoint``: the parent's, its kernel restored, a notebook of its
    own beside the parent's whose metadata names the parent (a resumed parent's own record is never its fork's)."""
    continued = getattr(parent.recorder_factory, "__self__", None)
    if isinstance(continued, Continuation):
        parent = replace(parent, recorder_factory=continued.options.recorder_factory,
                         gate_factory=continued.options.gate_factory)
    lineage = lineage or Lineage.from_record(checkpoint.lineage)  # ``budget``: what the fork's record says of it
    budget = budget or ({"lineage": lineage.id} if lineage else None)
    metadata = {**parent.metadata, "forked_from": {**checkpoint.record_of(), "fork": number, "of": of,
                                                   **({"budget": budget} if budget else {})}}
    notebook = fork_path(checkpoint.notebook, ".ipynb", number)
    return replace(parent, restore=checkpoint.restore, metadata=metadata, notebook=notebook,
                   gate_factory=KnownSecrets(parent.gate_factory, checkpoint.secrets, lineage))


def resume_options(path: str | Path, options: LaunchOptions) -> LaunchOptions:
    """``Session.resume``: the launch options that continue a paused session's record and kernel."""
    checkpoint = read_checkpoint(path)
    if checkpoint.kind != "pause":
        raise SessionError(f"{checkpoint.path} is a fork's checkpoint; its forks were started by Session.fork, and "
                           "it is not resumed as a session of its own")
    try:
        previous = read_previous(checkpoint.notebook)
    except Exception as exc:  # noqa: BLE001 - JournalError or OSError, said with the checkpoint's name
        raise SessionError(f"the record of the checkpoint {checkpoint.path} cannot be continued: {exc}") from None
    last = previous.records[-1]
    if (last["seq"], last["hash"]) != (checkpoint.journal["seq"], checkpoint.journal["hash"]):
        raise SessionError(f"{checkpoint.notebook}'s journal goes on past this checkpoint (it ends at record "
                           f"{last['seq']}, the checkpoint at {checkpoint.journal['seq']}): it was resumed already; "
                           "a checkpoint is resumed once")
    continuation = Continuation(previous, checkpoint, options)
    return replace(options, restore=checkpoint.restore, notebook=None, recorder_factory=continuation.recorder,
                   gate_factory=continuation.gate)


class Continuation:
    """A resumed session's recorder and gate: the paused record and its gate's state, going on."""

    def __init__(self, previous: Previous, checkpoint: Checkpoint, options: LaunchOptions) -> None:
        self.previous = previous
        self.checkpoint = checkpoint
        self.options = options  # the caller's, before the continuation's factories replaced theirs

    def recorder(self, notebook_path: Path, session_metadata: dict[str, Any],
                 open_journal: Any = Journal) -> Recorder:
        changed = setup_changes(self.previous.metadata, session_metadata)
        if changed:
            raise ConfigError(f"the session of {self.checkpoint.path} was made with other {', '.join(changed)}; "
                              "resume it with the tools, policy and sandbox settings it was made with")
        recorder = Recorder(self.previous.notebook, self.previous.metadata, open_journal=open_journal,
                            resumed=self.previous.records)
        recorder.event("session-resumed", checkpoint=self.checkpoint.id)
        recorder.write_notebook()
        return recorder

    def gate(self, registry: ToolRegistry, *, log: CallLog, policy: Policy, approver: Approver,
             session_id: str, call_timeout: float) -> Dispatcher:
        gate = Dispatcher(registry, log=log, policy=policy, approver=approver,
                          session_id=self.checkpoint.session_id, call_timeout=call_timeout,
                          first_seq=self.previous.next_call_seq)
        gate.secrets.restore(self.checkpoint.secrets)  # the kernel may still hold what the gate scrubbed
        gate.lineage = Lineage.from_record(self.checkpoint.lineage) or gate.lineage  # its budgets' ledger
        for record in self.previous.records:  # the session's budgets, as used before the pause
            counters = record.get("call", {}).get("counters") if record["event"] == "call-finished" else None
            if isinstance(counters, dict):
                tool = str(record["call"].get("tool"))
                gate.counters.session = max(gate.counters.session, int(counters.get("session", 0)))
                gate.counters.per_tool[tool] = max(gate.counters.per_tool.get(tool, 0),
                                                   int(counters.get("tool_session", 0)))
        gate.lineage.raise_to({"session": gate.counters.session,
                               **{f"tool:{tool}": n for tool, n in gate.counters.per_tool.items()}})
        return gate


class KnownSecrets:
    """A fork's gate factory: the parent's, its gate knowing what the parent's knew as secret (the fork's kernel
    holds what the parent's held)."""

    def __init__(self, factory: GateFactory, secrets: dict[str, str], lineage: Lineage | None = None) -> None:
        self.factory = factory
        self.secrets = secrets
        self.lineage = lineage  # the parent's budgets (or a share of them), which the fork draws on

    def __call__(self, registry: ToolRegistry, *, log: CallLog, policy: Policy, approver: Approver,
                 session_id: str, call_timeout: float) -> Dispatcher:
        gate = self.factory(registry, log=log, policy=policy, approver=approver, session_id=session_id,
                            call_timeout=call_timeout)
        gate.secrets.restore(self.secrets)
        if self.lineage is not None:
            gate.lineage = self.lineage
        return gate


__all__ = ["Checkpoint", "discard", "fork", "fork_options", "pause", "read_checkpoint", "resume_options"]
