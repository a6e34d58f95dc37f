"""docs/sandbox-images.md:41-43 (issue 43, suite item 8): "Root's images live in `/var/lib/cellgate/images`; an
ordinary user's in `$XDG_DATA_HOME/cellgate/images`, and a user also finds root's."

An ordinary user here is a real one: the lookups run in a process of uid 65534 (``setpriv``), with its own
``XDG_DATA_HOME``. Root's store is a root-owned folder standing in for ``/var/lib/cellgate/images`` (the process
is told its path through ``store.SYSTEM_STORE``, the one name the lookup reads it by), so the host's own images
are neither needed nor touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate.sandbox.images import store
from tests.unit.test_image_store import fake_image

NOBODY = 65534
LOOKUP = """
import json, sys
from pathlib import Path
from cellgate.gate.sandbox.images import store
store.SYSTEM_STORE = Path(sys.argv[1])
found = {name: (str(image.folder) if (image := store.find(name)) else None) for name in sys.argv[2:]}
try:
    store.resolve("nowhere")
except Exception as exc:
    said = str(exc)
print(json.dumps({"uid": __import__("os").geteuid(), "stores": [str(s) for s in store.stores()], "found": found,
                  "listed": sorted({str(s) for s, _, _ in store.listing()}), "said": said}))
"""


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder every user may enter (pytest's own tmp folders are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="cellgate-users-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def look_up(world: Path, root_store: Path, *names: str, as_user: bool) -> dict[str, Any]:
    data = world / "user-data"
    data.mkdir(exist_ok=True)
    env = {**os.environ, "XDG_DATA_HOME": str(data), "HOME": str(world)}
    env.pop("CELLGATE_IMAGE_STORE", None)
    argv = [sys.executable, "-c", LOOKUP, str(root_store), *names]
    if as_user:
        os.chown(data, NOBODY, NOBODY)
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=world, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def test_an_ordinary_user_finds_roots_images_and_their_own_first(world: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a root-owned store and running as another user needs root")
    root_store = world / "root-store"
    root_store.mkdir()
    shared = fake_image(root_store, "shared", {"pandas": "3.1.1"})
    store.point(root_store, "both", shared)  # root's "both" is that image too
    user_store = world / "user-data" / "cellgate" / "images"
    user_store.mkdir(parents=True)
    users_own = fake_image(user_store, "both", {"pandas": "2.0.0"})  # another build under the same name
    subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(world / "user-data")], check=True)

    seen = look_up(world, root_store, "shared", "both", f"sha256:{shared.digest}", as_user=True)
    assert seen["uid"] == NOBODY
    assert seen["stores"] == [str(user_store), str(root_store)]
    assert seen["found"] == {"shared": str(shared.folder), "both": str(users_own.folder),  # the user's own first
                             f"sha256:{shared.digest}": str(users_own.folder)}  # the same tree: own store first
    assert seen["listed"] == sorted([str(user_store), str(root_store)])  # `cellgate image list` shows both stores
    assert f"looked in {user_store}, {root_store}" in seen["said"]

    as_root = look_up(world, root_store, "shared", "both", as_user=False)  # root does not look in a user's store
    assert as_root["stores"] == [str(root_store)]
    assert as_root["found"] == {"shared": str(shared.folder), "both": str(shared.folder)}
