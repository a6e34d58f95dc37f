"""Snapshot starts, host side: restore each sandbox from an image of one that has already started.

Inside gVisor, starting Python and importing ipykernel, IPython and debugpy
is most of a sandbox's start. The first sandbox of a configuration is built
without a connection file; its kernel imports everything, says it is ready
and waits (``cellgate.kernel.snapshot``), and ``runsc checkpoint`` saves it as
an image. Every later sandbox of that configuration is ``runsc restore``d from
the image with its own bundle: its own mounts (tools, connection file with its
own key, socket folder), cgroup and id.

The image holds no secret (it is taken before any key exists and before any
cell runs) and is the host's: its user's only (0700) under ``run_root()/images``,
never mounted into a sandbox. Without root there are none: runsc cannot
restore ``--rootless``, so every sandbox starts cold (``enforcement``). Its key covers everything a restored sandbox keeps
from the image instead of its own bundle (limits, rlimits, environment: the
whole OCI spec but for the per-sandbox paths), the runsc that made it, and the
code it holds in memory (the kernel package, the installed distributions,
the Python build), so a restored sandbox is the one a cold start would make.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

import cellgate.kernel
from cellgate.gate._guarded import remove_tree_quietly
from cellgate.gate.sandbox.local.runsc import Runsc
from cellgate.gate.sandbox.runtime_dir import private_dir


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """What a snapshot holds in memory: the Python build, every installed distribution, the kernel package."""
    digest = hashlib.sha256(sys.version.encode())
    names = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions())
    digest.update("\n".join(names).encode())
    package = Path(cellgate.kernel.__file__).parent
    for source in sorted(package.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def image_key(spec_text: str, sandbox_root: str, runsc: Runsc) -> str:
    """The image a sandbox with this OCI spec can be restored from."""
    spec = json.loads(spec_text.replace(sandbox_root, "<sandbox>"))
    spec["linux"].pop("cgroupsPath", None)  # per sandbox, and taken from its own bundle
    binary = os.stat(runsc.path)
    body = {"spec": spec, "runsc": runsc.describe(), "runsc_file": [binary.st_size, binary.st_mtime_ns],
            "code": code_digest()}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]


# Images kept; the least recently used go first (each is ~40 MB, on /run).
MAX_IMAGES = 8


def ensure_image(folder: Path, key: str, build: Callable[[Path], None]) -> Path:
    """The image for ``key``, built by ``build(target)`` if there is none yet (once, across processes)."""
    image = folder / key
    if image.is_dir():
        os.utime(image)  # recently used: pruned last
        return image
    private_dir(folder)
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it right now
        if image.is_dir():
            return image
        for stale in folder.glob(f".{key}.*"):  # a build whose process died; nobody else holds the lock
            remove_tree_quietly(stale)
        partial = folder / f".{key}.{secrets.token_hex(4)}"
        partial.mkdir(mode=0o700)
        try:
            build(partial)
            os.rename(partial, image)  # complete or absent, never half-written
        finally:
            remove_tree_quietly(partial)
    prune(folder, MAX_IMAGES)
    return image


def prune(folder: Path, keep: int) -> int:
    """Delete all but the ``keep`` most recently used images; returns how many went."""
    images = sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for image in images[keep:]:
        remove_tree_quietly(image)
        (folder / f"{image.name}.lock").unlink(missing_ok=True)
    return len(images[keep:])


def discard(folder: Path, key: str) -> None:
    """Forget an image that failed to restore; the next start builds a new one."""
    remove_tree_quietly(folder / key)
