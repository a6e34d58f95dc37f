"""A skip in the sandbox tiers fails the run unless tests/allowed_skips.txt lists it (issue 43, item 7; the plugin
is tests/skip_list.py). Each run here is a real pytest run, in and out of pytest-xdist's controller."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SUITE = '''
import pytest

@pytest.mark.gvisor
def test_sandbox_skip():
    pytest.skip("no runsc cgroup here")

@pytest.mark.browser
@pytest.mark.skipif(True, reason="no chromium")
def test_browser_skip():
    pass

def test_unit_skip():
    pytest.skip("a unit test may skip")

@pytest.mark.gvisor
@pytest.mark.xfail(reason="known")
def test_sandbox_xfail():
    assert False

@pytest.mark.gvisor
def test_sandbox_passes():
    pass
'''


def run(tmp_path: Path, allowed: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gvisor: x\n    browser: x\n")
    (tmp_path / "test_tiers.py").write_text(SUITE)
    (tmp_path / "allowed.txt").write_text(allowed)
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "skip_list", "-p", "no:randomly",
                           "-p", "no:cacheprovider", "--allowed-skips", str(tmp_path / "allowed.txt"), "-rs", *args,
                           "test_tiers.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("workers", [["-n", "0"], ["-n", "1"]], ids=["in-process", "xdist"])
def test_an_unlisted_sandbox_skip_fails_the_run_and_is_named(tmp_path: Path, workers: list[str]) -> None:
    done = run(tmp_path, "# only the browser's\ntest_tiers.py::test_browser_skip  no chromium on this host\n",
               *workers)
    assert done.returncode == 1, done.stdout + done.stderr
    said = done.stdout.split("not listed in", 1)[1].split("\n=", 1)[0]  # the plugin's block, not -rs's
    assert "test_tiers.py::test_sandbox_skip: no runsc cgroup here" in said, done.stdout
    assert "test_browser_skip" not in said and "test_unit_skip" not in said and "xfail" not in said, said
    assert "3 skipped" in done.stdout, done.stdout  # each still printed by -rs, and counted


def test_listed_skips_by_id_or_pattern_pass(tmp_path: Path) -> None:
    done = run(tmp_path, "test_tiers.py::test_sandbox_skip  cgroup v2 host\ntest_tiers.py::test_browser_*  none\n",
               "-n", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not listed" not in done.stdout


def test_an_entry_without_a_reason_is_refused_up_front(tmp_path: Path) -> None:
    done = run(tmp_path, "test_tiers.py::test_sandbox_skip\n", "-n", "0")
    assert done.returncode == 4 and "allowed.txt:1: test_tiers.py::test_sandbox_skip has no reason" in done.stderr, (
        done.stdout + done.stderr)


def test_the_suites_list_reads_and_names_tests_that_exist() -> None:
    from skip_list import ALLOWED, read_allowed  # type: ignore[import-not-found]  # tests/ is on sys.path, not mypy's

    for pattern, reason in read_allowed(ALLOWED):
        path = TESTS.parent / pattern.split("::", 1)[0]
        assert path.is_file() and pattern.split("::")[1].split("[", 1)[0] in path.read_text(), pattern
        assert reason
