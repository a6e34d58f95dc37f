"""The kernel's side of snapshot starts (``gate.snapshot`` is the host's).

Starting Python and importing ipykernel and IPython is most of a
sandbox's start inside gVisor. So the host builds, once per configuration, a
snapshot image of a sandbox that has done exactly that and is waiting for its
connection file; every later sandbox of that configuration is restored from
the image with its own mounts and finds its own connection file there.

A snapshot holds no secret: it is taken before any connection file (and so
any session key) exists, and before any cell runs.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import time

from . import wire

READY_ENV = wire.ENV_SNAPSHOT_READY

# Imported before the snapshot: what the kernel and ipykernel's start import.
PRELOAD = (
    "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.comm",
    "IPython.core.completerlib", "IPython.core.debugger", "IPython.core.logger", "IPython.core.oinspect",
    "IPython.extensions.storemagic", "tornado.queues", "cellgate.kernel.kernel", "cellgate.kernel.restricted",
)


# ipykernel's own choice, made here first: matplotlib reads it once, when it is imported.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # optional parts (RestrictedPython) load later if at all; debugpy on the first debug request
    image_preload()
    if os.environ.get(wire.ENV_WARM_COMPLETION) == "1":  # the image's choice: its spec's warm_completion
        warm_completer()


def image_preload() -> None:
    """The image's own heavy modules (its spec's ``preload``: pandas, matplotlib), imported into the snapshot so
    that a cell importing them finds them loaded (inside gVisor an import of pandas costs seconds)."""
    try:
        names = json.loads(os.environ.get(wire.ENV_PRELOAD, "[]"))
    except ValueError:
        return
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    for name in names if isinstance(names, list) else ():
        try:
            importlib.import_module(str(name))
        except Exception:  # noqa: BLE001, S112 - a module that does not import is imported (and fails) in its cell
            continue


def warm_completer() -> None:
    """Have jedi parse what every completion needs (builtins, typing stubs), so the image holds it parsed.

    parso keeps parsed modules in memory, keyed by path and checked against
    the file's mtime, and the restored sandbox sees the same files: its first
    Tab completion then takes as long as later ones (measured in gVisor:
    4 s cold, 0.1 s warm). The parse is ~29 MB of every sandbox's memory, so
    only an image that asks for it (``warm_completion``) holds it.
    """
    try:
        import jedi  # type: ignore[import-untyped]
    except ImportError:
        return
    jedi.Interpreter("zi", [{}]).complete()


def wait_for_connection(connection_file: str) -> None:
    """Return when ``connection_file`` exists; if it does not yet, this is a snapshot being built.

    The host then checkpoints the sandbox while this waits; a restored copy
    continues from here in its own sandbox.
    """
    if os.path.exists(connection_file):
        return  # an ordinary start
    ready = os.environ.get(READY_ENV)
    if not ready:
        return  # no snapshot expected: let ipykernel report the missing file
    preload()
    with open(ready, "w") as marker:
        marker.write("ready\n")
    while not os.path.exists(connection_file):
        time.sleep(0.002)  # the host checkpoints the sandbox during this wait
    after_restore()


def after_restore() -> None:
    """What must differ between sandboxes restored from one image."""
    random.seed()  # else every restored kernel draws the same `random` numbers
    importlib.invalidate_caches()  # the tools package and the workspace are new mounts


def connection_file(argv: list[str]) -> str | None:
    for flag, value in zip(argv, argv[1:]):
        if flag in ("-f", "--f", "--IPKernelApp.connection_file"):
            return value
    return None
