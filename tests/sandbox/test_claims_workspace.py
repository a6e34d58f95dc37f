"""README claims about `[sandbox] workspace` (issue 21): a host folder is bound read-write at /workspace, what a
cell writes there appears on the host, nothing outside the folder is reachable through it, and a folder is used
only if the filesystem holding it has at most `workspace_mb` free."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from cellgate.gate._errors import CellgateError
from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.gvisor

SECRET = "host-canary-5d1e"



@pytest.fixture()
def bounded_folder(tmp_path: Path, runsc: object) -> Iterator[Path]:
    """A host folder on its own 16 MB tmpfs, as the README tells operators to give it."""
    folder = tmp_path / "ws"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0777", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def config(folder: Path, workspace: Path, workspace_mb: int) -> Path:
    path = folder / "cellgate.toml"
    path.write_text(f"[sandbox]\nworkspace = {json.dumps(str(workspace))}\nworkspace_mb = {workspace_mb}\n")
    return path


def test_a_host_workspace_is_bound_read_write_and_nothing_outside_it_is_reachable(tmp_path: Path,
                                                                                  bounded_folder: Path) -> None:
    (tmp_path / "canary.txt").write_text(SECRET)  # beside the workspace folder, on the host
    (bounded_folder / "given.txt").write_text("from the host\n")
    os.symlink(tmp_path / "canary.txt", bounded_folder / "absolute-link")
    os.symlink("../canary.txt", bounded_folder / "relative-link")
    with BlockingSession(config=config(tmp_path, bounded_folder, 32), notebook=tmp_path / "run.ipynb",
                         cwd=tmp_path) as box:
        wrote = box.execute("print(open('/workspace/given.txt').read(), end='')\n"
                            "with open('/workspace/made-in-cell.txt', 'w') as f:\n    f.write('from the cell\\n')\n"
                            "import os\nos.mkdir('/workspace/sub')\nopen('/workspace/sub/x', 'w').write('x')")
        assert wrote.status == "ok" and wrote.stdout == "from the host\n", (wrote.stdout, wrote.error)
        assert (bounded_folder / "made-in-cell.txt").read_text() == "from the cell\n"
        assert (bounded_folder / "sub" / "x").read_text() == "x"

        probe = box.execute(f"""
import os
def attempt(path):
    try:
        return open(path).read()
    except OSError as exc:
        return type(exc).__name__
print(attempt('/workspace/absolute-link'))
print(attempt('/workspace/relative-link'))
print(attempt({str(tmp_path / "canary.txt")!r}))
print(attempt('/workspace/../canary.txt'))
print(os.path.realpath('/workspace/..'), sorted(os.listdir('/workspace')))
""")
        assert probe.status == "ok", probe.error
        lines = probe.stdout.splitlines()
        assert lines[:4] == ["FileNotFoundError"] * 4, lines
        assert lines[4] == "/ ['absolute-link', 'given.txt', 'made-in-cell.txt', 'relative-link', 'sub']", lines
        assert SECRET not in probe.stdout
    assert (tmp_path / "canary.txt").read_text() == SECRET


def test_a_workspace_on_a_filesystem_with_more_free_than_workspace_mb_is_refused(tmp_path: Path,
                                                                                 bounded_folder: Path) -> None:
    # The 16 MB tmpfs is too big for workspace_mb = 8: refused, naming the folder, the sizes and the fix.
    box = BlockingSession(config=config(tmp_path, bounded_folder, 8), notebook=tmp_path / "run.ipynb", cwd=tmp_path)
    try:
        with pytest.raises(CellgateError) as refused:
            box.start()
    finally:
        box.close()
    message = str(refused.value)
    assert f"[sandbox] workspace = {str(bounded_folder)!r} is on a filesystem with 16 MB free" in message, message
    assert "more than workspace_mb = 8" in message and "mount -t tmpfs" in message, message
    assert not (bounded_folder / "made-in-cell.txt").exists()
    # The same folder with workspace_mb at least its free space is used.
    with BlockingSession(config=config(tmp_path, bounded_folder, 16), notebook=tmp_path / "ok.ipynb",
                         cwd=tmp_path) as box:
        assert box.execute("open('/workspace/ok', 'w').write('ok')").status == "ok"
    assert (bounded_folder / "ok").read_text() == "ok"


def test_a_relative_workspace_is_the_config_files_folders(tmp_path: Path, bounded_folder: Path) -> None:
    # `workspace = "ws"` beside the config file, the session started from another folder.
    (tmp_path / "cellgate.toml").write_text('[sandbox]\nworkspace = "ws"\nworkspace_mb = 16\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with BlockingSession(config=tmp_path / "cellgate.toml", notebook=tmp_path / "rel.ipynb", cwd=elsewhere) as box:
        wrote = box.execute("open('/workspace/relative', 'w').write('found')")
        assert wrote.status == "ok", wrote.error
    assert (bounded_folder / "relative").read_text() == "found"
