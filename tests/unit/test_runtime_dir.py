"""Per-user runtime folders: made 0700, and refused unless this user's alone (as another user it is
tests/security/test_other_users.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.sandbox.runtime_dir import check_private, private_dir


def test_missing_folders_are_made_0700_and_a_private_one_is_used_as_it_is(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "a" / "b")
    assert [oct((tmp_path / part).stat().st_mode & 0o777) for part in ("a", "a/b")] == ["0o700", "0o700"]
    (made / "kept").write_text("x")
    assert private_dir(made) == made and (made / "kept").read_text() == "x"


@pytest.mark.parametrize("plant", ["open mode", "link", "file", "writable parent"])
def test_a_folder_that_is_not_this_users_alone_is_refused_naming_it(tmp_path: Path, plant: str) -> None:
    target = tmp_path / "state"
    if plant == "open mode":
        target.mkdir(mode=0o755)
        target.chmod(0o755)
        said = "open to others (mode 755)"
    elif plant == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        target.symlink_to(tmp_path / "elsewhere")
        said = "is a symbolic link"
    elif plant == "file":
        target.write_text("")
        said = "is not a folder"
    else:
        tmp_path.chmod(0o777)  # anyone could rename the folder and put their own in its place
        target = tmp_path / "state" / "inner"
        said = f"inside {tmp_path}, which others may write to (mode 777, not sticky)"
    with pytest.raises(ConfigError) as raised:
        private_dir(target)
    assert str(target) in str(raised.value) and said in str(raised.value)
    assert plant != "writable parent" or not (tmp_path / "state").exists()  # refused before anything was made
    if plant in ("open mode", "link"):
        with pytest.raises(ConfigError):
            check_private(target)  # what readers of the folder (doctor --clean, approvals list) check


@pytest.mark.root_only("it gives the folder to another user")
def test_a_folder_of_another_user_is_refused_naming_its_owner(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir(mode=0o700)
    os.chown(target, 4242, 4242)
    with pytest.raises(ConfigError, match=f"{target} belongs to uid 4242, not to you"):
        private_dir(target)
