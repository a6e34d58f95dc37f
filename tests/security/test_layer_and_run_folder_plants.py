"""Security round 4 (issue 42, must-show): what a cell plants at the names the host uses in the package layer and in
the run folders the sandbox can reach does not steer the host.

The package layer (``%pip install``'s folder, ``session/package_layer.py``) is a host folder the host fills after
the sandbox has started: ``calls.wheels`` replaces each top-level name it installs (``good``, ``good-1.0.dist-info``,
``bin``), removing what was there. It is bound read-only at ``PACKAGES_DIR`` and is root's, 0755, so a cell cannot
plant there at all: each plant is refused inside the sandbox, and the host's installs, before and after, find only
what it put there itself. The other sandbox-writable folders are the socket folder (``test_socket_folder.py``) and
a host ``[sandbox] workspace``, in which the host uses no name at all (it reads the filesystem's free space, on the
folder itself): a cell plants there at the names it and the host's uploads and downloads use, and restarts,
installs and file moves go on. A symlink to a host file, a FIFO, a folder and a hard link at each name; the host file
outside stays as it was (content, owner, mode), every step is bounded by a deadline, and each step completes or
fails with a clear error.

Real gVisor sandboxes, a real pip from a local index of one wheel.
"""

from __future__ import annotations

import ast
import io
import json
import os
import stat
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cellgate.gate._errors import CellgateError
from cellgate.gate.sandbox.environment import PACKAGES_DIR, WORKSPACE
from cellgate.gate.sandbox.local import oci
from cellgate.gate.sandbox.runtime_dir import run_root
from cellgate.gate.session.sync import SyncSession
from cellgate.gate.testing import BlockingSession
from tests.security.test_socket_folder import Sentinel, given_away

pytestmark = pytest.mark.gvisor

KINDS = ["symlink", "fifo", "folder", "hardlink"]
STEP_WAIT = 120.0  # seconds: a bound on each step, so a hang fails the test instead of holding it
WHEEL = "good-1.0-py3-none-any.whl"
# Every top-level name the host writes, replaces or removes in the layer when it installs the wheel, and one more.
LAYER_NAMES = ["good", "good-1.0.dist-info", "bin", "planted"]
WORKSPACE_NAMES = ["planted", "uploaded.txt", "downloaded.txt"]

PLANT = """
import errno, os
folder, kind, target, source = {folder!r}, {kind!r}, {target!r}, {source!r}
outcome = {{}}
for name in {names!r}:
    path = os.path.join(folder, name)
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rename(path, path + ".moved")
        elif os.path.lexists(path):
            os.unlink(path)
        if kind == "symlink":
            os.symlink(target, path)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            os.mkdir(path)
            open(os.path.join(path, "inside"), "w").close()
        else:
            os.link(source, path)
        outcome[name] = "planted"
    except OSError as exc:
        outcome[name] = errno.errorcode[exc.errno]
print(repr(outcome))
"""


def plant(box: SyncSession, folder: str, kind: str, target: Path, source: str, names: list[str]) -> dict[str, str]:
    planted = box.execute(PLANT.format(folder=folder, kind=kind, target=str(target), source=source, names=names),
                          timeout=STEP_WAIT)
    assert planted.status == "ok", planted.error
    outcome: dict[str, str] = ast.literal_eval(planted.stdout.strip())
    return outcome


def wheel() -> bytes:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("good/__init__.py", "X = 42\n")
        archive.writestr("good-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: good\nVersion: 1.0\n")
        archive.writestr("good-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr("good-1.0.data/scripts/good-tool", "#!python\nprint('tool')\n")
    return data.getvalue()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local index of one wheel for the host's pip, and a wheel cache of the test's own."""
    folder = tmp_path / "index"
    folder.mkdir()
    (folder / WHEEL).write_bytes(wheel())
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("CELLGATE_WHEEL_CACHE", str(tmp_path / "cache"))
    return folder


@pytest.fixture
def bounded_folder(tmp_path: Path, runsc: object) -> Iterator[Path]:
    """A host workspace folder on its own 16 MB tmpfs, as the README tells operators to give it."""
    folder = tmp_path / "ws"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0777", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def config(folder: Path, workspace: Path | None = None) -> Path:
    path = folder / "cellgate.toml"
    sandbox = f"[sandbox]\nworkspace = {json.dumps(str(workspace))}\nworkspace_mb = 32\n\n" if workspace else ""
    path.write_text(f'{sandbox}[packages]\nallow = ["good"]\nmax_mb = 16\n\n[policy]\ndefault = "deny"\n\n'
                    '[policy.tools.pip_install]\ndecision = "allow"\n')
    return path


def layer_of(box: SyncSession) -> Path:
    """The session's package layer on the host: this test run's run root holds this session's alone (one test
    at a time; other processes' sandboxes have run roots of their own)."""
    assert box.execute("print(1)", timeout=STEP_WAIT).status == "ok"
    layers = list((run_root() / "packages").iterdir())
    assert len(layers) == 1, layers
    return layers[0]


def only_the_hosts(layer: Path) -> list[str]:
    """Anything in the layer the host did not put there: a link, a FIFO, a file of the sandbox's uid, a cell's name."""
    strange = []
    for path in [layer, *layer.rglob("*")]:
        info = os.lstat(path)
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)) or info.st_uid == oci.SANDBOX_UID \
                or path.name in ("planted", "inside") or path.name.endswith(".moved"):
            strange.append(f"{path} {stat.filemode(info.st_mode)} uid {info.st_uid}")
    return strange


def install(box: SyncSession) -> None:
    installed = box.execute("%pip install good", timeout=STEP_WAIT)
    assert installed.ok, installed.text


@pytest.mark.parametrize("kind", KINDS)
def test_a_cell_cannot_plant_in_its_package_layer_and_installs_find_only_the_hosts_files(
        tmp_path: Path, index: Path, kind: str) -> None:
    sentinel = Sentinel(tmp_path / "host-file")
    with BlockingSession(config=config(tmp_path), tools=[], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as box:
        layer = layer_of(box)
        before = plant(box, PACKAGES_DIR, kind, sentinel.path, "/tmp/x", LAYER_NAMES)  # the layer still empty
        install(box)
        source = f"{PACKAGES_DIR}/good/__init__.py"  # a file of the layer's, for a hard link within it
        after = plant(box, PACKAGES_DIR, kind, sentinel.path, source, LAYER_NAMES)
        refused = {name: why for name, why in {**before, **after}.items() if why != "planted"}
        assert refused == {**before, **after}, (before, after)  # not one name planted
        assert set(refused.values()) <= {"EROFS", "EACCES", "EPERM", "ENOENT"}, refused
        install(box)  # the host replaces each of its names again
        assert only_the_hosts(layer) == []
        box.restart()  # the layer is bound again into the new sandbox
        imported = box.execute("import good; print(good.X)", timeout=STEP_WAIT)
        assert imported.stdout == "42\n", imported.text
    assert sentinel.state() == sentinel.before
    assert given_away(tmp_path) == []


@pytest.mark.parametrize("kind", KINDS)
def test_names_a_cell_plants_in_a_host_workspace_do_not_steer_the_host(
        tmp_path: Path, index: Path, bounded_folder: Path, kind: str) -> None:
    sentinel = Sentinel(tmp_path / "host-file")
    failures: list[str] = []
    with BlockingSession(config=config(tmp_path, bounded_folder), tools=[], notebook=tmp_path / "run.ipynb",
                         cwd=tmp_path) as box:
        made = box.execute(f"open('{WORKSPACE}/cell-file', 'w').write('a file of the cell\\'s')", timeout=STEP_WAIT)
        assert made.status == "ok", made.error
        planted = plant(box, WORKSPACE, kind, sentinel.path, f"{WORKSPACE}/cell-file", WORKSPACE_NAMES)
        assert set(planted.values()) == {"planted"}, planted  # the workspace is the cell's to write
        install(box)
        for step in (lambda: box.run_async(box.session.upload(f"{WORKSPACE}/uploaded.txt", b"the host's bytes"),
                                           timeout=STEP_WAIT),
                     lambda: box.run_async(box.session.download(f"{WORKSPACE}/downloaded.txt"), timeout=STEP_WAIT),
                     box.restart):
            try:
                step()
            except CellgateError as exc:  # refused with an error naming what is in the way
                assert "/workspace/" in str(exc) or "restart" in str(exc), exc
                failures.append(str(exc))
        served = box.execute("import good; print(good.X)", timeout=STEP_WAIT)
        assert served.stdout == "42\n", served.text
    assert sentinel.state() == sentinel.before
    assert given_away(tmp_path / "cache") == [] and given_away(tmp_path / "index") == []
    assert os.lstat(tmp_path).st_uid == os.geteuid()
