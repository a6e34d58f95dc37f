"""Where built images live: content-addressed root filesystems, and the names that point at them.

::

    <store>/sha256-<digest>/manifest.json   what it is: spec, locked packages, Debian packages, size
    <store>/sha256-<digest>/rootfs/         the root filesystem, read-only, the sandbox's whole /
    <store>/names/<name>.json               {"digest": ..., "spec_key": ...}: the image a name means now
    <store>/tmp/                            builds under way (same filesystem: an image appears by one rename)

The digest is of the tree itself (every path, type, mode, content and link target), so a name points at exactly
one content. Root's store is /var/lib/cellgate/images; a user's is ``$XDG_DATA_HOME/cellgate/images``, and a user
also finds root's images (read-only to them). ``CELLGATE_IMAGE_STORE`` puts the own store elsewhere.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import cellgate.kernel
from cellgate.gate._errors import ConfigError, SandboxUnavailable
from cellgate.gate._guarded import remove_tree
from cellgate.gate._json import write_atomically

# Standard library only (no pydantic): the local backend's parts run on it (``sandbox.limits``).
NAME_PATTERN: Final = r"^[a-z][a-z0-9_-]{0,62}$"
HOST: Final = "host"  # not an image: the host's own /usr and the gate's environment, bound read-only (development)
SYSTEM_STORE: Final = Path("/var/lib/cellgate/images")
DIGEST_PREFIX: Final = "sha256-"
MANIFEST: Final = "manifest.json"
MANIFEST_MAX_BYTES: Final = 8 << 20  # a manifest is host state, still read within a bound


def kernel_slice() -> Path:
    """This cellgate's kernel slice (``cellgate.kernel``), which every image holds a copy of."""
    return Path(cellgate.kernel.__file__).resolve().parent


@functools.cache
def kernel_digest() -> str:
    """The sha256 of the kernel slice's sources: an image built from another slice is stale."""
    digest = hashlib.sha256()
    for path in sorted(kernel_slice().rglob("*.py")):
        digest.update(str(path.relative_to(kernel_slice())).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def own_store() -> Path:
    """The store this user builds into."""
    configured = os.environ.get("CELLGATE_IMAGE_STORE")
    if configured:
        return Path(configured)
    if os.geteuid() == 0:
        return SYSTEM_STORE
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "cellgate" / "images"


def stores() -> list[Path]:
    """Where images are looked up, in order: the own store, then root's (for an ordinary user)."""
    own = own_store()
    return [own] if own == SYSTEM_STORE or os.geteuid() == 0 else [own, SYSTEM_STORE]


@dataclass(frozen=True)
class Image:
    """One built image, as its manifest says."""

    folder: Path
    manifest: dict[str, Any]

    @property
    def digest(self) -> str:
        return str(self.manifest["digest"])

    @property
    def name(self) -> str:
        return str(self.manifest["spec"]["name"])

    @property
    def rootfs(self) -> Path:
        return self.folder / "rootfs"

    @property
    def preload(self) -> tuple[str, ...]:
        """Modules its snapshot imports (the spec's ``preload``)."""
        return tuple(str(name) for name in self.manifest["spec"].get("preload", []))

    @property
    def warm_completion(self) -> bool:
        """Whether its snapshot holds jedi's parse (the spec's ``warm_completion``)."""
        return self.manifest["spec"].get("warm_completion") is True

    @property
    def python(self) -> str:
        """The image's interpreter, inside it."""
        return f"/usr/bin/python{self.manifest['python_version']}"

    def record(self) -> dict[str, Any]:
        """What a run's record says of the image: enough to rebuild it and to tell another from it."""
        keys = ("digest", "spec", "spec_key", "python_version", "python_packages", "debian", "kernel_slice_sha256")
        return {key: self.manifest[key] for key in keys if key in self.manifest}


def record_of(image: Image | None) -> dict[str, Any]:
    """The record's word on a sandbox's image (``sandbox.image`` of a run's metadata); None: ``host``."""
    if image is None:
        return {"name": HOST, "digest": None,
                "note": "the host's /usr and the gate's Python environment, bound read-only (development only)"}
    return {"name": image.name, **image.record()}


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    with open(path, "rb") as handle:
        data = handle.read(MANIFEST_MAX_BYTES + 1)
    if len(data) > MANIFEST_MAX_BYTES:
        raise ConfigError(f"{path} is over {MANIFEST_MAX_BYTES >> 20} MB: not a manifest cellgate wrote")
    manifest = json.loads(data)
    if not isinstance(manifest, dict) or manifest.get("digest") != folder.name.removeprefix(DIGEST_PREFIX):
        raise ConfigError(f"{path} does not describe the image in {folder}: remove it with `cellgate image gc`")
    return manifest


def _name_file(store: Path, name: str) -> Path:
    return store / "names" / f"{name}.json"


def _pointer(store: Path, name: str) -> dict[str, Any] | None:
    try:
        data = json.loads(_name_file(store, name).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and re.fullmatch(r"[0-9a-f]{64}", str(data.get("digest"))) else None


def find(name: str) -> Image | None:
    """The image ``name`` (a name, or ``sha256:<digest>``) means, from the first store that has it; None if none."""
    for store in stores():
        if name.startswith("sha256:"):
            digest = name.removeprefix("sha256:")
        else:
            pointer = _pointer(store, name) if re.fullmatch(NAME_PATTERN, name) else None
            if pointer is None:
                continue
            digest = pointer["digest"]
        folder = store / f"{DIGEST_PREFIX}{digest}"
        if re.fullmatch(r"[0-9a-f]{64}", digest) and (folder / MANIFEST).is_file():
            return Image(folder, read_manifest(folder))
    return None


def resolve(name: str) -> Image:
    """The image ``name`` means; SandboxUnavailable saying how to build it if there is none, or if it holds
    another kernel slice than this cellgate's (the kernel and the gate speak one protocol, of one version)."""
    image = find(name)
    if image is not None and image.manifest.get("kernel_slice_sha256") != kernel_digest():
        raise SandboxUnavailable(
            f"[sandbox] image = {name!r} (sha256:{image.digest[:16]}…) holds another version of cellgate's kernel "
            f"than this cellgate: run `cellgate image build {image.name}` to build it for this version")
    if image is None:
        looked = ", ".join(str(store) for store in stores())
        raise SandboxUnavailable(
            f"[sandbox] image = {name!r} is not built (looked in {looked}): run `cellgate image build {name}` "
            f"(`cellgate image list` shows what is built; image = {HOST!r} runs the host's own Python, for "
            "development only)")
    return image


def spec_key_image(store: Path, name: str, spec_key: str) -> Image | None:
    """The image ``name`` points at in ``store`` if it was built from the spec ``spec_key`` (a build to skip)."""
    pointer = _pointer(store, name)
    if pointer is None or pointer.get("spec_key") != spec_key:
        return None
    folder = store / f"{DIGEST_PREFIX}{pointer['digest']}"
    return Image(folder, read_manifest(folder)) if (folder / MANIFEST).is_file() else None


def point(store: Path, name: str, image: Image) -> None:
    """Let ``name`` mean ``image`` from now on (sessions started before keep the one they have)."""
    (store / "names").mkdir(parents=True, exist_ok=True)
    write_atomically(_name_file(store, name), json.dumps({"digest": image.digest, "spec_key": image.manifest["spec_key"]}))
    os.chmod(_name_file(store, name), 0o644)  # root's names are read by users too


def listing() -> Iterator[tuple[Path, str | None, Image]]:
    """Every image of every store: (store, the name pointing at it or None, the image)."""
    for store in stores():
        named: dict[str, str] = {}
        for file in sorted((store / "names").glob("*.json")) if (store / "names").is_dir() else ():
            pointer = _pointer(store, file.stem)
            if pointer is not None:
                named.setdefault(pointer["digest"], file.stem)
        for folder in sorted(store.glob(f"{DIGEST_PREFIX}*")) if store.is_dir() else ():
            try:
                image = Image(folder, read_manifest(folder))
            except (OSError, ValueError, ConfigError):
                continue
            yield store, named.get(image.digest), image


def remove(name: str) -> list[str]:
    """Drop the name ``name`` from the own store; the image goes with ``gc``. Returns what was removed."""
    store = own_store()
    if _pointer(store, name) is None:
        raise ConfigError(f"no image called {name!r} in {store}: `cellgate image list` shows what there is")
    _name_file(store, name).unlink()
    return [name]


def gc() -> list[str]:
    """Delete the own store's images no name points at, and builds a crash left; returns their folders' names."""
    store = own_store()
    kept = {pointer["digest"] for file in (store / "names").glob("*.json")
            if (pointer := _pointer(store, file.stem)) is not None} if (store / "names").is_dir() else set()
    removed = []
    for folder in sorted(store.glob(f"{DIGEST_PREFIX}*")) if store.is_dir() else ():
        if folder.name.removeprefix(DIGEST_PREFIX) not in kept:
            delete_tree(folder)
            removed.append(folder.name)
    for folder in sorted((store / "tmp").iterdir()) if (store / "tmp").is_dir() else ():
        delete_tree(folder)
        removed.append(f"tmp/{folder.name}")
    return removed


def delete_tree(folder: Path) -> None:
    """Remove an image's folder, whose folders were made read-only: through descriptors (``_guarded``), so a
    symlink in the store is removed itself and nothing it points to is chmodded or removed."""
    remove_tree(folder)


def file_sha256(path: Path) -> str:
    """The sha256 of a file's content, read in chunks (an image's files, a wheel)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(root: Path) -> tuple[str, int]:
    """The sha256 of a tree (each path in order, its type, permission bits, content or link target) and its size."""
    outer = hashlib.sha256()
    size = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        relative = os.path.relpath(folder, root)
        for name in sorted([*dirs, *files]):
            path = os.path.join(folder, name)
            info = os.lstat(path)
            entry = os.path.normpath(os.path.join(relative, name))
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                line = f"l {entry} {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                line = f"d {entry} {mode:o}"
            elif stat.S_ISREG(info.st_mode):
                size += info.st_size
                line = f"f {entry} {mode:o} {file_sha256(Path(path))}"
            else:
                line = f"o {entry} {stat.S_IFMT(info.st_mode):o}"  # a device or fifo: named, never read
            outer.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return outer.hexdigest(), size
