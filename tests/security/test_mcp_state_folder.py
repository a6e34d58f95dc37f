"""The state folder of `cellgate mcp serve` (``[mcp] state_dir``) is this user's alone, or the server does not start
(issue 43, suite item 3).

The folder holds the paused sessions' memory (their checkpoints). Found rather than made, it is used only if it is a
folder, not a link to one, owned by this user, and neither readable nor writable by group or others; so is its
``checkpoints/`` folder. Anything else at either name (a file, a FIFO) is refused without waiting on it, and a
link planted among the checkpoints is never followed when stale ones are swept. What is planted at ``parked.json``
and ``parked.lock`` is tested in ``test_mcp_parked_owner.py``; these tests are about the folders.

The first tests drive ``Parking`` (what ``cellgate mcp serve`` builds first, before it serves); the last starts the
real server on a refused folder.
"""

from __future__ import annotations

import concurrent.futures
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CELLGATE

from cellgate.extensions.mcp.parked import CHECKPOINTS, ORPHAN_AGE, Parking
from cellgate.gate import ConfigError

NOBODY = 65534


def refused(folder: Path, *says: str) -> str:
    """``Parking(folder)`` refused (in 30 s: a hang fails), with a message naming ``says``."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(Parking, folder)
        try:
            failure = future.exception(timeout=30)
        except concurrent.futures.TimeoutError:
            pytest.fail(f"Parking({folder}) hung on what was planted there")
    assert isinstance(failure, ConfigError), f"not refused: {failure!r}"
    message = str(failure)
    for text in says:
        assert text in message, message
    return message


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    path.chmod(0o700)
    return path


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_folder_it_makes_is_0700_and_a_private_one_it_finds_is_used(tmp_path: Path) -> None:
    old = os.umask(0)  # what the server makes does not depend on the umask it was started with
    try:
        made = Parking(tmp_path / "a" / "state")
    finally:
        os.umask(old)
    for folder in (made.folder, made.checkpoints):
        info = os.lstat(folder)
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o700, os.geteuid()), folder
    found = private(tmp_path / "found")
    private(found / CHECKPOINTS)
    assert Parking(found).folder == found


@pytest.mark.parametrize("where", ["state", "checkpoints"])
def test_a_link_to_a_private_folder_is_refused_and_nothing_is_written_through_it(tmp_path: Path, where: str) -> None:
    target = private(tmp_path / "elsewhere")
    state = tmp_path / "state"
    if where == "state":
        state.symlink_to(target)
        place = state
    else:
        private(state)
        place = state / CHECKPOINTS
        place.symlink_to(target)
    refused(state, f"{place} (the state folder of cellgate mcp serve) is not a folder of this user's alone",
            "owner uid", "remove it, or set [mcp] state_dir")
    assert listing(target) == []


def foreign_folder(tmp_path: Path) -> Path:
    """A folder of mode 0700 that another user owns."""
    if os.geteuid() == 0:
        folder = private(tmp_path / "theirs")
        os.chown(folder, NOBODY, NOBODY)
        return folder
    root = Path("/root")  # an ordinary user: root's home is such a folder on this image
    info = os.lstat(root)
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o700), "no folder of another user's to test with"
    return root


def test_a_folder_of_another_users_is_refused(tmp_path: Path) -> None:
    theirs = foreign_folder(tmp_path)
    message = refused(theirs, str(theirs), f"owner uid {os.lstat(theirs).st_uid}", "is not a folder of this user's")
    assert "drwx------" in message  # its mode is private: it is the owner that is refused


def test_a_checkpoints_folder_of_another_users_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder inside this user's to another user")
    state = private(tmp_path / "state")
    os.chown(private(state / CHECKPOINTS), NOBODY, NOBODY)
    refused(state, str(state / CHECKPOINTS), f"owner uid {NOBODY}")


@pytest.mark.parametrize("mode", [0o770, 0o750, 0o710, 0o707, 0o705, 0o701, 0o1777], ids=oct)
@pytest.mark.parametrize("where", ["state", "checkpoints"])
def test_a_folder_others_may_read_or_write_is_refused(tmp_path: Path, mode: int, where: str) -> None:
    state = private(tmp_path / "state")
    place = state if where == "state" else private(state / CHECKPOINTS)
    place.chmod(mode)
    refused(state, str(place), stat.filemode(stat.S_IFDIR | mode))
    assert stat.S_IMODE(os.lstat(place).st_mode) == mode  # refused, not quietly chmod-ed
    assert not (state / "parked.lock").exists()


@pytest.mark.parametrize("kind", ["file", "fifo"])
@pytest.mark.parametrize("where", ["state", "checkpoints"])
def test_a_file_or_fifo_at_a_folders_name_is_refused_without_waiting_on_it(tmp_path: Path, kind: str,
                                                                           where: str) -> None:
    state = tmp_path / "state"
    place = state if where == "state" else private(state) / CHECKPOINTS
    if kind == "file":
        place.write_text("the host's own\n")
    else:
        os.mkfifo(place, 0o600)
    refused(state, str(place), "cannot be made", "set [mcp] state_dir")
    assert stat.S_ISREG(os.lstat(place).st_mode) if kind == "file" else stat.S_ISFIFO(os.lstat(place).st_mode)


def aged(path: Path) -> None:
    past = time.time() - ORPHAN_AGE - 60
    os.utime(path, (past, past), follow_symlinks=False)


def test_a_link_planted_among_the_checkpoints_is_not_followed_when_stale_ones_are_swept(tmp_path: Path) -> None:
    parking = Parking(tmp_path / "state")
    host = private(tmp_path / "host-data")
    (host / "keep.txt").write_text("the host's own\n")
    planted = parking.checkpoints / ("0" * 32)
    planted.symlink_to(host, target_is_directory=True)
    stale = parking.checkpoints / ("1" * 32)  # a real orphan, so the sweep is shown to run
    private(stale)
    aged(planted)
    aged(stale)
    assert parking.expire(idle_timeout=1800.0) == 0
    assert not stale.exists()
    assert listing(host) == ["keep.txt"] and (host / "keep.txt").read_text() == "the host's own\n"


def test_the_server_refuses_to_start_on_a_linked_state_folder(tmp_path: Path) -> None:
    target = private(tmp_path / "elsewhere")
    (tmp_path / "state").symlink_to(target)
    (tmp_path / "cellgate.toml").write_text('[mcp]\nstate_dir = "state"\n')
    done = subprocess.run([*CELLGATE, "mcp", "serve", "--transport", "stdio"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-2000:]
    assert f"{tmp_path / 'state'} (the state folder of cellgate mcp serve) is not a folder of this user's alone" \
        in said, said[-2000:]
    assert "Traceback" not in said
    assert listing(target) == []
