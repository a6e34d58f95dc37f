"""``cellgate exec`` checks every path it will write before a sandbox starts (issue 43, item 3): a ``--checkpoint``
folder that exists, or whose folder is missing or not writable, and an ``--output`` into a missing folder are
refused at once, not after every cell ran (when the kernel's state would be lost).

``CELLGATE_RUNSC`` names no runsc: a refusal that came only once a sandbox was asked for would say "runsc not found"
(exit 3) instead of naming the path (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "p.py"
    path.write_text("print(1)\n")
    return path


def refused(cli, tmp_path: Path, program: Path, *args: str) -> str:
    done = cli("exec", str(program), "--notebook", str(tmp_path / "n.ipynb"), *args,
               env={"CELLGATE_RUNSC": str(tmp_path / "no-runsc")}, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "n.ipynb").exists() and not (tmp_path / "n.journal.jsonl").exists()
    return " ".join(done.stderr.split())


def test_an_existing_checkpoint_folder_is_refused_before_the_sandbox_starts(cli, tmp_path: Path, program: Path) -> None:
    (tmp_path / "runs" / "cp.checkpoint").mkdir(parents=True)
    said = refused(cli, tmp_path, program, "--checkpoint", "runs/cp.checkpoint")
    assert "--checkpoint 'runs/cp.checkpoint' exists; a checkpoint is written only into a new folder" in said


def test_a_checkpoint_in_a_missing_folder_is_refused_before_the_sandbox_starts(cli, tmp_path: Path,
                                                                            program: Path) -> None:
    said = refused(cli, tmp_path, program, "--checkpoint", "absent/cp")
    assert "--checkpoint 'absent/cp': the folder" in said and "does not exist; make it first" in said


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder of mode 0500")
def test_a_checkpoint_in_a_read_only_folder_is_refused_before_the_sandbox_starts(cli, tmp_path: Path,
                                                                              program: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    said = refused(cli, tmp_path, program, "--checkpoint", "locked/cp")
    assert "is not writable by this user" in said


def test_an_output_into_a_missing_folder_is_refused_before_the_sandbox_starts(cli, tmp_path: Path,
                                                                           program: Path) -> None:
    said = refused(cli, tmp_path, program, "--output", "/tmp/x.csv:absent/x.csv")
    assert "--output destination 'absent/x.csv': the folder" in said and "does not exist" in said
