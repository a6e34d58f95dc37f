"""A skipped test of the sandbox tiers fails the run unless ``tests/allowed_skips.txt`` lists it with a reason.

The sandbox tiers (tests marked ``gvisor``: tests/sandbox, tests/security, tests/integrations and any test using the
``runsc`` fixture; and ``browser``) never skip in CI: a skip there is a check that did not run, and CI's output
said "1 skipped" and nothing else (issue 43, item 7). scripts/test prints each skip with its reason (``-rsx``); this
plugin fails the run for each one the list does not name, so a new skip is a decision someone wrote down.

The list: one entry a line, a test id or an ``fnmatch`` pattern of ids, then whitespace and the reason (required);
``#`` starts a comment line. With pytest-xdist the controller sees every worker's reports
(``pytest_runtest_logreport``) and decides once, at the end; a worker decides nothing.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

ALLOWED = Path(__file__).with_name("allowed_skips.txt")
GUARDED = ("gvisor", "browser")  # the markers of the tiers in which a skip must be listed


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--allowed-skips", default=str(ALLOWED), metavar="PATH",
                     help="the skips of the sandbox tiers that do not fail the run (default: tests/allowed_skips.txt)")


def read_allowed(path: Path) -> list[tuple[str, str]]:
    """The list's (pattern, reason) entries; an entry without a reason is a usage error."""
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        pattern, _, reason = text.partition(" ")
        if not reason.strip():
            raise pytest.UsageError(f"{path}:{number}: {pattern} has no reason: write why it may skip after it")
        entries.append((pattern, reason.strip()))
    return entries


def unlisted(skips: list[tuple[str, str]], allowed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(nodeid, reason) for nodeid, reason in skips
            if not any(fnmatch.fnmatchcase(nodeid, pattern) for pattern, _ in allowed)]


class SkipList:
    """The controller's (or a ``-n 0`` run's) record of the guarded tiers' skips, and its verdict."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.allowed = read_allowed(path)  # a bad list is said up front, not after the run
        self.skips: list[tuple[str, str]] = []
        self.left: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        if any(marker in report.keywords for marker in GUARDED):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            self.skips.append((report.nodeid, reason))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.left = unlisted(self.skips, self.allowed)
        if self.left and session.exitstatus == 0:
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter: object) -> None:
        if not self.left:
            return
        write = terminalreporter.write_line  # type: ignore[attr-defined]
        write(f"skipped in a sandbox tier and not listed in {self.path} (the run fails; list it there with a "
              "reason if the skip is right):", red=True)
        for nodeid, reason in self.left:
            write(f"  {nodeid}: {reason}", red=True)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # a worker decides nothing: the controller sees its reports
        config.pluginmanager.register(SkipList(Path(config.getoption("allowed_skips"))), "cellgate_skip_list")
