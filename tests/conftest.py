"""Shared fixtures. Sandbox tests use the real gVisor sandbox and never skip:
without runsc they fail with the fix (`cellgate doctor --fix`)."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.runsc import find
from cellgate.gate.sandbox.container import owner_alive, run_root
from cellgate.gate.testing import BlockingSession

ROOT = Path(__file__).resolve().parent.parent

SAMPLE_TOOLS = ROOT / "tests" / "tools" / "sample_tools.py"
NORTHWIND = ROOT / "examples" / "northwind"


@pytest.fixture(scope="session", autouse=True)
def host_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test (and every CLI it starts) signs with a key of its own, never the user's real one."""
    folder = tmp_path_factory.mktemp("hostkey")
    folder.chmod(0o700)
    path = folder / "host.key"
    before = os.environ.get("CELLGATE_HOST_KEY")
    os.environ["CELLGATE_HOST_KEY"] = str(path)
    yield path
    if before is None:
        os.environ.pop("CELLGATE_HOST_KEY", None)
    else:
        os.environ["CELLGATE_HOST_KEY"] = before


@pytest.fixture(scope="session")
def runsc() -> object:
    try:
        return find()
    except SandboxUnavailable as exc:
        pytest.fail(f"gVisor is required for this test and is not usable: {exc}")


@pytest.fixture(scope="module")
def approvals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A queue folder of the module's own for approval requests (``$CELLGATE_APPROVALS_DIR``), set for the
    sessions it starts and the CLI processes they run."""
    folder = tmp_path_factory.mktemp("approvals")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CELLGATE_APPROVALS_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module")
def session_factory(runsc: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Start sandboxed sessions that are closed when the module ends."""
    opened: list[BlockingSession] = []
    folder = tmp_path_factory.mktemp("runs")

    def start(**options: object) -> BlockingSession:
        options.setdefault("tools", [SAMPLE_TOOLS])
        options.setdefault("notebook", folder / f"run-{len(opened)}.ipynb")
        options.setdefault("cwd", folder)
        box = BlockingSession(**options).start()
        opened.append(box)
        return box

    yield start
    for box in opened:
        box.close()


@pytest.fixture(scope="module")
def box(session_factory: object) -> BlockingSession:
    """One shared sandboxed session with the sample tools."""
    return session_factory(call_timeout=2.0)  # type: ignore[operator]


def runsc_sandboxes() -> list[str]:
    """Command lines of runsc processes on this machine."""
    out = subprocess.run(["pgrep", "-a", "-f", "runsc-sandbox|runsc-gofer|runsc .*(run|restore) .*--bundle"],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def sandbox_ids() -> set[str]:
    return set(re.findall(r"\b(cg-[0-9a-f]{12})\b", "\n".join(runsc_sandboxes())))


def leaked(sandbox_id: str) -> bool:
    """A sandbox is leaked if this run owns it, or its owner is gone."""
    try:
        owner = json.loads((run_root() / sandbox_id / "owner.json").read_text())
    except (OSError, ValueError):
        return True  # processes without a run folder: nobody will reap them
    return owner.get("pid") == os.getpid() or not owner_alive(owner)


def token() -> str:
    return secrets.token_hex(8)


_BEFORE: set[str] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _BEFORE.update(sandbox_ids())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No runsc process that this run started may outlive it (other runs' sandboxes are theirs)."""
    left = sorted(i for i in sandbox_ids() - _BEFORE if leaked(i))
    if left:
        print("\nrunsc sandboxes left after the suite: " + ", ".join(left))
        session.exitstatus = 1


__all__ = ["ROOT", "SAMPLE_TOOLS", "NORTHWIND", "runsc_sandboxes", "token", "os"]


def free_port() -> int:
    """A local TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[Any], what: str, seconds: float = 60) -> None:
    """Wait until ``process`` accepts connections on ``port``; fail with ``what`` if it exits or takes too long."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, what
            time.sleep(0.05)
