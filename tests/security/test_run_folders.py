"""A run's blob folder and run folders against another local user (tests/security/README.md, "Other local users").

The run's folder is a shared one (sticky and world-writable, as /tmp, or a project everyone may write to), so
another user can create ``<run>.blobs`` before the owner's session does: a symlink to a folder of theirs, a
folder they own, or one their group may write. The recorder of the owner's session (here: this test process,
as root when it is root, the case the issue found) must refuse each with an error naming the path and saying
what to do, and put nothing there. What the recorder creates is the owner's alone: run folders and the blob
folder 0700, the journal and each blob 0600.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cellgate.gate._errors import JournalError
from cellgate.gate._json import canonical_json
from cellgate.gate.audit.recorder import Recorder

STRANGER = 2_000_001  # a uid without an account (none is needed to own files)
DIGEST = "ab" * 32


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


@pytest.fixture
def theirs(tmp_path: Path) -> Path:
    """A folder the other user owns and lets everyone write to (as root: really theirs)."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    folder.chmod(0o777)
    if os.geteuid() == 0:
        os.chown(folder, STRANGER, STRANGER)
    return folder


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_planted_blob_symlink_stops_the_start_and_nothing_is_written_through_it(shared: Path, theirs: Path) -> None:
    (shared / "run.blobs").symlink_to(theirs)
    with pytest.raises(JournalError) as refused:
        Recorder(shared / "run.ipynb", {})
    said = str(refused.value)
    assert f"the result blobs' folder {shared / 'run.blobs'} is a symbolic link (to {str(theirs)!r})" in said
    assert "remove the link, or record to a notebook in a folder of your own" in said
    assert os.listdir(theirs) == []
    assert sorted(os.listdir(shared)) == ["run.blobs"]  # no journal, no notebook: refused before anything


def test_a_blob_symlink_planted_after_the_start_is_refused_at_the_first_blob(shared: Path, theirs: Path) -> None:
    recorder = Recorder(shared / "run.ipynb", {})
    try:
        (shared / "run.blobs").symlink_to(theirs)
        with pytest.raises(JournalError, match="is a symbolic link"):
            recorder.blobs.store(DIGEST, canonical_json({"rows": [1, 2, 3]}))
        assert os.listdir(theirs) == []
    finally:
        recorder.close()


def test_a_blob_folder_swapped_after_it_was_opened_is_not_written_through(shared: Path, theirs: Path) -> None:
    """The folder checked once is the one written to: a link renamed into its place later leads nowhere."""
    recorder = Recorder(shared / "run.ipynb", {})
    try:
        assert recorder.blobs.store(DIGEST, canonical_json({"first": 1})) == f"run.blobs/{DIGEST}.json"
        (shared / "run.blobs").rename(shared / "moved.blobs")
        (shared / "run.blobs").symlink_to(theirs)
        recorder.blobs.store("cd" * 32, canonical_json({"second": 2}))
        assert os.listdir(theirs) == []
        assert sorted(os.listdir(shared / "moved.blobs")) == sorted([f"{DIGEST}.json", f"{'cd' * 32}.json"])
    finally:
        recorder.close()


@pytest.mark.root_only("a folder owned by another uid")
def test_a_blob_folder_another_user_owns_is_refused(shared: Path) -> None:
    planted = shared / "run.blobs"
    planted.mkdir(mode=0o700)
    os.chown(planted, STRANGER, STRANGER)
    with pytest.raises(JournalError) as refused:
        Recorder(shared / "run.ipynb", {})
    said = str(refused.value)
    assert f"the result blobs' folder {planted} belongs to uid {STRANGER}, not to you (uid 0)" in said
    assert "Ask them or root to remove it" in said
    assert os.listdir(planted) == [] and not (shared / "run.journal.jsonl").exists()


def test_a_blob_folder_others_may_write_to_is_refused(shared: Path) -> None:
    planted = shared / "run.blobs"
    planted.mkdir()
    planted.chmod(0o770)  # the group could have put a forged blob in it
    with pytest.raises(JournalError) as refused:
        Recorder(shared / "run.ipynb", {})
    said = str(refused.value)
    assert f"the result blobs' folder {planted} may be written by others (mode 770)" in said
    assert f"run `chmod go-w {planted}`, else remove it" in said
    assert os.listdir(planted) == []


def test_the_journal_is_opened_the_same_way(shared: Path, theirs: Path) -> None:
    (shared / "run.journal.jsonl").symlink_to(theirs / "journal")
    with pytest.raises(JournalError, match=r"the journal .*run\.journal\.jsonl is a symbolic link"):
        Recorder(shared / "run.ipynb", {})
    assert os.listdir(theirs) == []


def test_what_the_recorder_creates_is_the_owners_alone(tmp_path: Path) -> None:
    notebook = tmp_path / "home" / "project" / "runs" / "run.ipynb"
    recorder = Recorder(notebook, {})
    try:
        recorder.blobs.store(DIGEST, canonical_json({"rows": list(range(100))}))
    finally:
        recorder.close()
    for folder in (tmp_path / "home", tmp_path / "home" / "project", notebook.parent, notebook.with_suffix(".blobs")):
        assert mode(folder) == 0o700, (folder, oct(mode(folder)))
    for file in (notebook, notebook.with_name("run.journal.jsonl"), notebook.with_suffix(".blobs") / f"{DIGEST}.json"):
        assert mode(file) == 0o600, (file, oct(mode(file)))
