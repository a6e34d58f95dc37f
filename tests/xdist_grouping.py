"""The suite's pytest-xdist groups, scheduled by the groups themselves, and a check that they held.

With ``-n N --dist loadgroup`` (scripts/test) a test's group is the name of its ``xdist_group`` mark (several:
joined as pytest-xdist joins them) or else its file, and one group's tests run on one worker, one after another.
pytest-xdist's own loadgroup carries the group from the workers to the scheduler by appending it to the node id,
which pytest 9.2 no longer lets a plugin change (pytest-xdist issue #1386: it then groups nothing, silently). Here
each worker writes its tests' groups to a file of the run's (the controller names the folder in the workers'
``workerinput``) before it reports its collection, and the scheduler reads the groups from there: nothing depends on
how pytest builds node ids.

Whatever schedules them, each worker reports with every test its group and its own id (the test report's
``user_properties``), and at the end the controller fails the run if one group's tests ran on more than one
worker, naming them: a grouping that is off is a failed run, not a slower or flaky one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

GROUP = "xdist_group"  # the user_properties keys each test's report carries
WORKER = "xdist_worker"
_FOLDER = "cellgate_groups"  # the workerinput key: where the workers write their tests' groups


def group_of(item: pytest.Item) -> str:
    """The ``xdist_group`` marks' names (sorted, joined by "_", as pytest-xdist does), or else the test's file."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    if names:
        return "_".join(sorted(names))
    return item.nodeid.split("::", 1)[0]


def _worker_input(config: pytest.Config) -> dict[str, Any] | None:
    return getattr(config, "workerinput", None)


def _distributed(config: pytest.Config) -> bool:
    """This is the controller of a pytest-xdist run that has workers."""
    return _worker_input(config) is None and bool(getattr(config.option, "numprocesses", None)) \
        and getattr(config.option, "dist", "no") != "no"


def pytest_configure(config: pytest.Config) -> None:
    if _distributed(config):
        config.stash[_folder_key] = Path(tempfile.mkdtemp(prefix="cellgate-xdist-groups-"))
        config.stash[_seen_key] = defaultdict(set)
        config.stash[_ungrouped_key] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_folder_key, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


_folder_key = pytest.StashKey[Path]()
_seen_key = pytest.StashKey[defaultdict[str, set[tuple[str, str]]]]()  # group -> {(worker, nodeid)}
_ungrouped_key = pytest.StashKey[list[str]]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Controller: tell each worker where to write its tests' groups."""
    node.workerinput[_FOLDER] = str(node.config.stash[_folder_key])


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reports the collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    workerinput = _worker_input(session.config)
    if workerinput is None:
        return
    groups = {}
    for item in session.items:
        group = groups[item.nodeid] = group_of(item)
        item.user_properties += [(GROUP, group), (WORKER, workerinput["workerid"])]
    if _FOLDER in workerinput and getattr(session.config.option, "loadgroup", False):  # a worker's "dist" is "no"
        written = Path(workerinput[_FOLDER], f"{workerinput['workerid']}.json")
        partial = written.with_suffix(".partial")
        partial.write_text(json.dumps(groups))
        os.replace(partial, written)  # the scheduler never reads half a file


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: schedule whole groups, read from the workers' files (pytest-xdist's own reads them
    from node ids that pytest 9.2 no longer changes)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = config.stash[_folder_key]
    groups: dict[str, str] = {}  # node id -> group, as the workers wrote them

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:  # called once every worker reported its collection
            if nodeid not in groups:
                for written in folder.glob("*.json"):
                    groups.update(json.loads(written.read_text()))
            try:
                return groups[nodeid]
            except KeyError:
                raise RuntimeError(f"no xdist group for {nodeid!r}: no worker wrote it to {folder} when it "
                                   "collected (tests/xdist_grouping.py)") from None

    return GroupScheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Controller: which worker ran each test of each group (as the worker reported it)."""
    config = getattr(report, "node", None) and report.node.config  # set by pytest-xdist on the controller
    if config is None or not _distributed(config) or report.when != "setup":
        return
    properties = dict(report.user_properties)
    if GROUP in properties and WORKER in properties:
        config.stash[_seen_key][str(properties[GROUP])].add((str(properties[WORKER]), report.nodeid))
    else:
        config.stash[_ungrouped_key].append(report.nodeid)


def split_groups(config: pytest.Config) -> list[str]:
    """Controller, at the end: a line for each group whose tests ran on more than one worker, and one for the tests
    that came without their group (the check could not judge them)."""
    if not _distributed(config) or _seen_key not in config.stash:
        return []
    lines = []
    for group, runs in sorted(config.stash[_seen_key].items()):
        workers = sorted({worker for worker, _ in runs})
        if len(workers) > 1:
            where = "; ".join(f"{w}: {sum(1 for x, _ in runs if x == w)} tests" for w in workers)
            lines.append(f"xdist group {group!r} ran on {len(workers)} workers ({where})")
    ungrouped = config.stash[_ungrouped_key]
    if ungrouped:
        lines.append(f"{len(ungrouped)} tests reported no xdist group or worker, e.g. {ungrouped[0]}")
    return lines


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if split_groups(session.config):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _distributed(config) or _seen_key not in config.stash:
        return
    split = split_groups(config)
    seen = config.stash[_seen_key]
    if split:
        terminalreporter.section("xdist groups split across workers", sep="=", red=True)
        for line in split:
            terminalreporter.write_line(line)
        terminalreporter.write_line("a group's tests must run on one worker: run with --dist loadgroup "
                                    "(scripts/test does), which tests/xdist_grouping.py schedules")
        return
    tests = sum(len(runs) for runs in seen.values())
    terminalreporter.write_line(f"xdist groups: {len(seen)} groups of {tests} tests, each group on one worker")
    if config.getoption("verbose") > 0:
        for group, runs in sorted(seen.items()):
            (worker,) = {w for w, _ in runs}
            terminalreporter.write_line(f"  {group}: {len(runs)} tests on {worker}")
