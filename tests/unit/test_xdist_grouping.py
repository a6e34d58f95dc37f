"""The suite's xdist groups (tests/xdist_grouping.py): a group's tests run on one worker, and a run whose groups
were split across workers fails, naming them. A small suite of its own runs on two real pytest-xdist workers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from conftest import TESTS

FILES = {
    "test_a.py": "import pytest\n\n@pytest.mark.parametrize('i', range(6))\ndef test_a(i):\n    pass\n",
    "test_b.py": "import pytest\n\n@pytest.mark.parametrize('i', range(6))\ndef test_b(i):\n    pass\n",
    # one group across two files, as the suite's "cpu" group
    "test_c.py": "import pytest\n\npytestmark = pytest.mark.xdist_group('shared')\n\n"
                 "@pytest.mark.parametrize('i', range(3))\ndef test_c(i):\n    pass\n",
    "test_d.py": "import pytest\n\npytestmark = pytest.mark.xdist_group('shared')\n\n"
                 "@pytest.mark.parametrize('i', range(3))\ndef test_d(i):\n    pass\n",
}


def run_suite(folder: Path, dist: str) -> tuple[subprocess.CompletedProcess[str], dict[str, set[str]]]:
    """Run the small suite on two workers with ``--dist dist``; also which workers ran each file's tests."""
    for name, text in FILES.items():
        (folder / name).write_text(text)
    (folder / "pytest.ini").write_text("[pytest]\n")  # its own rootdir, not the repository's settings
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "xdist_grouping", "-p", "no:randomly",
                           "-p", "no:cacheprovider", "-n", "2", "--dist", dist, "-v"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=240)
    workers: dict[str, set[str]] = defaultdict(set)
    for worker, test_file in re.findall(r"^\[(gw\d)\] \[[ \d]+%\] PASSED (test_\w+\.py)::", done.stdout, re.M):
        workers[test_file].add(worker)
    return done, workers


def test_each_files_tests_and_each_named_groups_run_on_one_worker(tmp_path: Path) -> None:
    done, workers = run_suite(tmp_path, "loadgroup")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert set(workers) == set(FILES), done.stdout[-3000:]
    assert all(len(ran_on) == 1 for ran_on in workers.values()), workers
    assert workers["test_c.py"] == workers["test_d.py"], workers  # the group, not the file
    assert "xdist groups: 3 groups of 18 tests, each group on one worker" in done.stdout
    assert re.search(r"^  shared: 6 tests on gw\d$", done.stdout, re.M), done.stdout[-3000:]


def test_a_run_whose_groups_were_split_across_workers_fails_naming_them(tmp_path: Path) -> None:
    done, workers = run_suite(tmp_path, "load")  # pytest-xdist's round robin: no grouping at all
    assert any(len(ran_on) > 1 for ran_on in workers.values()), workers  # the control: they did split
    assert done.returncode == 1, done.stdout[-3000:]
    assert "passed" in done.stdout.splitlines()[-1] and "failed" not in done.stdout.splitlines()[-1]
    assert re.search(r"^xdist group 'test_a\.py' ran on 2 workers \(gw0: \d+ tests; gw1: \d+ tests\)$",
                     done.stdout, re.M), done.stdout[-3000:]
    assert "run with --dist loadgroup (scripts/test does)" in done.stdout
