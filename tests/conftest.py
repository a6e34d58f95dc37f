"""Shared fixtures, helpers and the tiers.

Each folder is a tier and gets its marker here (README, "Run the tests"): ``unit`` (no runsc, no kernel),
``kernel`` (the kernel as a local subprocess, ``isolation = "none"``), ``gvisor`` (sandbox/ and security/: the
real gVisor sandbox), ``golden`` (snapshot comparisons) and ``browser``. A test of any tier that uses the
``runsc`` fixture is ``gvisor`` as well. gVisor tests never skip: without runsc they fail with the fix
(`cellgate doctor --fix`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest
from jupyter_client import BlockingKernelClient

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.local import reaper
from cellgate.gate.sandbox.local.container import Sandbox
from cellgate.gate.sandbox.local.local_backend import LocalHandle
from cellgate.gate.sandbox.local.runsc import find
from cellgate.gate.testing import BlockingSession

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

TOOLS = TESTS / "tools"
SAMPLE_TOOLS = TOOLS / "sample_tools.py"
COUNTED_TOOLS = TOOLS / "counted.py"
NORTHWIND = ROOT / "examples" / "northwind"
SNAPSHOTS = TESTS / "golden" / "snapshots"

# The command line as a user runs it; CLI tests start it as a subprocess of this interpreter (the venv's code).
CELLGATE = [sys.executable, "-m", "cellgate.gate"]


def cellgate(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, stdin: str | None = None,
             timeout: float = 300, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``cellgate ARGS`` to completion; ``env`` adds to this process's environment."""
    return subprocess.run([*CELLGATE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          cwd=cwd, input=stdin, timeout=timeout, **kwargs)


def local_sandbox(session: Any) -> Sandbox:
    """The running kernel's local ``Sandbox`` (its run folder, cgroups, ipc folder) of a ``Session``, for tests
    that look below the seam; the gate itself only holds the backend's handle."""
    handle = session.provisioner.handle
    assert isinstance(handle, LocalHandle), f"not a local sandbox: {handle!r}"
    return handle.sandbox


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Ran]:
    """The command line's ``main`` in this process, for the unit tier (no interpreter start and imports per case):
    the same arguments, exit code and output as ``cellgate`` run by ``cellgate()`` above."""
    from cellgate.gate.ops.cli import main

    def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Ran:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own errors
            code = exc.code if isinstance(exc.code, int) else 2
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run


# Folder -> marker. A test file outside these folders is an error: every test belongs to a tier.
TIERS = {"unit": "unit", "kernel": "kernel", "sandbox": "gvisor", "security": "gvisor", "golden": "golden",
         "browser": "browser", "integrations": "gvisor"}


def tier_of(path: Path) -> str:
    try:
        folder = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        folder = ""
    if folder not in TIERS:
        raise pytest.UsageError(f"{path} is not in a tier folder; move it under tests/{{{','.join(TIERS)}}}/")
    return folder


# scripts/test runs the suite on pytest-xdist workers with --dist loadgroup: one group's tests run on one worker, one
# after another, and the run fails if they did not (tests/xdist_grouping.py schedules and checks the groups).
# A skip in the sandbox tiers fails the run unless tests/allowed_skips.txt lists it with a reason (skip_list.py).
pytest_plugins = ["xdist_grouping", "skip_list"]


@pytest.hookimpl(tryfirst=True)  # the markers are there for -m and for the xdist groups (read when collection ends)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(TIERS[tier_of(item.path)])
        # A file is a group of its own (its module's shared session starts once) unless it names one: "cpu" for
        # the tests whose limits or bounds count CPU or wall time, so no two of them compete for the cores; the
        # browser tier is one (one JupyterLab, one Chromium at a time).
        if item.get_closest_marker("xdist_group") is None and tier_of(item.path) == "browser":
            item.add_marker(pytest.mark.xdist_group("browser"))
        if "runsc" in getattr(item, "fixturenames", ()):
            item.add_marker("gvisor")
    # A test of what only root has (root_only) or only an ordinary user meets (ordinary_user) belongs to the
    # other leg of CI (README, "Run the tests"): deselected here, run there, never skipped.
    other_leg = "ordinary_user" if os.geteuid() == 0 else "root_only"
    elsewhere = [item for item in items if item.get_closest_marker(other_leg) is not None]
    if elsewhere:
        config.hook.pytest_deselected(items=elsewhere)
        items[:] = [item for item in items if item.get_closest_marker(other_leg) is None]


@pytest.fixture(autouse=True)
def _gvisor_tests_need_runsc(request: pytest.FixtureRequest) -> None:
    """A gVisor test fails up front, saying how to get runsc, rather than somewhere inside a session start."""
    if request.node.get_closest_marker("gvisor") is not None:
        request.getfixturevalue("runsc")



@pytest.fixture(autouse=True)
def _shared_folders_keep_their_modes() -> Iterator[None]:
    """No test (and nothing of cellgate's it runs) changes the machine's shared folders: a /tmp left without
    o+w once broke every later test of other users' plants, far from whatever did it."""
    before = {path: os.stat(path).st_mode for path in _SHARED_FOLDERS}
    yield
    after = {path: os.stat(path).st_mode for path in _SHARED_FOLDERS}
    changed = {path: f"{before[path]:o} -> {after[path]:o}" for path in before if before[path] != after[path]}
    assert not changed, f"this test changed the mode of shared folders: {changed}"


_SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")

@pytest.fixture(scope="session", autouse=True)
def host_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test (and every CLI it starts) signs with a key of its own, never the user's real one."""
    folder = tmp_path_factory.mktemp("hostkey")
    folder.chmod(0o700)
    path = folder / "host.key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CELLGATE_HOST_KEY", str(path))
        yield path


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
def isolation(request: pytest.FixtureRequest) -> str:
    """The kernel tier runs the kernel as a local subprocess; every other tier in gVisor (and needs runsc)."""
    if tier_of(request.path) == "kernel":
        return "none"
    request.getfixturevalue("runsc")
    return "gvisor"


@pytest.fixture(scope="module")
def session_factory(isolation: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Start sessions (sandboxed, or local in the kernel tier) that are closed when the module ends."""
    opened: list[BlockingSession] = []
    folder = tmp_path_factory.mktemp("runs")
    started = itertools.count()  # every start its own name: a start that failed may have left a record behind

    def start(**options: object) -> BlockingSession:
        if isolation == "none":
            options.setdefault("isolation", "none")
        options.setdefault("tools", [SAMPLE_TOOLS])
        options.setdefault("notebook", folder / f"run-{next(started)}.ipynb")
        options.setdefault("cwd", folder)
        box = BlockingSession(**options).start()
        opened.append(box)
        return box

    yield start
    with contextlib.ExitStack() as closing:  # every session is closed, even after one fails to close
        for box in opened:
            closing.callback(box.close)


@pytest.fixture(scope="module")
def box(session_factory: object) -> BlockingSession:
    """One shared sandboxed session with the sample tools."""
    return session_factory(call_timeout=2.0)  # type: ignore[operator]


def runsc_sandboxes() -> list[str]:
    """Command lines of runsc processes on this machine."""
    out = subprocess.run(["pgrep", "-a", "-f", "runsc-sandbox|runsc-gofer|runsc .*(run|restore) .*--bundle"],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def token() -> str:
    return secrets.token_hex(8)


def this_runs_folder(config: pytest.Config) -> Path:
    """This run's temporary folder (pytest's basetemp; with pytest-xdist a worker's own is inside the whole
    run's): every run folder of its sandboxes, its own run root included, is under it."""
    return config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]  # pytest has no public getter


@pytest.fixture(scope="session", autouse=True)
def own_run_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every run (each pytest-xdist worker) keeps its sandboxes' run folders, snapshot images and approval queue
    in a run root of its own, never the machine's: another run's `doctor --clean`, image pruning or leftover
    check cannot touch them, and the check below counts exactly this run's sandboxes."""
    root = tmp_path_factory.mktemp("runroot")
    root.chmod(0o700)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CELLGATE_RUN_ROOT", str(root))
        yield root
    shutil.rmtree(root / "images", ignore_errors=True)  # ~40 MB each; pytest keeps the last runs' folders


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No runsc process that this run started may outlive it (other runs' sandboxes are theirs): runsc names
    its state folder (``--root=``, inside a run folder) on its command line, and this run's are all inside
    this run's folder. With pytest-xdist each worker checks its own and the controller all of them at the end."""
    folder = f"{this_runs_folder(session.config)}/"
    ours = [line for line in runsc_sandboxes() if folder in line]
    left = sorted({found for line in ours for found in re.findall(r"\b(cg-[0-9a-f]{12})\b", line)} or ours)
    if left:
        print("\nrunsc sandboxes left after the suite: " + ", ".join(left))
        session.exitstatus = 1
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", None):
        stray = children_left_running()  # the controller's children are its workers: each checks its own
        if stray:
            print("\nchild processes left running after the suite (now killed): " + "; ".join(stray))
            session.exitstatus = 1


def children_left_running() -> list[str]:
    """This process's child processes still running once every fixture has ended (a kernel, a server, a session
    nobody closed), each as ``pid command line``; they are killed, so a leak fails the run rather than hanging
    it at exit or warning there (``subprocess N is still running``)."""
    stray = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE or reaper.__file__ in child.cmdline():
                continue  # ended, only not yet waited for; or the reaper, which outlives this process by design
            stray.append(f"{child.pid} {' '.join(child.cmdline())[:200]}")
            for process in [*child.children(recursive=True), child]:
                process.kill()
        except psutil.NoSuchProcess:
            continue
    return stray


__all__ = ["ROOT", "TOOLS", "SAMPLE_TOOLS", "COUNTED_TOOLS", "NORTHWIND", "SNAPSHOTS", "CELLGATE", "cellgate",
           "runsc_sandboxes", "token", "os"]


def free_port() -> int:
    """A local TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_on_a_free_port(start: Callable[[int], subprocess.Popen[Any]], log: Path, what: str,
                         seconds: float = 60, attempts: int = 3,
                         host: str = "127.0.0.1") -> tuple[int, subprocess.Popen[Any]]:
    """Start a server (``start(port)``, writing to ``log``) on a port that was free a moment ago and wait until it
    accepts connections. Another process can take the port in between: when the log says so, start it again on a
    fresh port; any other exit, or no listener within ``seconds``, fails naming ``what`` and the log."""
    for _ in range(attempts):
        port = free_port()
        process = start(port)
        deadline = time.monotonic() + seconds
        while process.poll() is None:
            try:
                socket.create_connection((host, port), timeout=1).close()
            except OSError:
                if time.monotonic() > deadline:
                    process.kill()
                    pytest.fail(f"{what}: nothing listens on port {port} after {seconds} s; see {log}")
                time.sleep(0.05)  # polling for the listener; the process gives no other signal
                continue
            if process.poll() is None:
                return port, process
        if "address already in use" not in log.read_text(errors="replace").lower():
            break
    pytest.fail(f"{what}: it exited with {process.returncode}; {log}:\n{log.read_text(errors='replace')[-2000:]}")


class AttachedReplay:
    """A client attached to the kernel `cellgate replay --interactive` left: ``run(code)`` gives the reply's
    content and the cell's stream text; ``client`` sends anything else; ``said(text)`` reads the replay's
    stdout up to the line that contains ``text``."""

    def __init__(self, replay: subprocess.Popen[str], client: BlockingKernelClient) -> None:
        self.replay = replay
        self.client = client

    def __call__(self, code: str, **kwargs: Any) -> tuple[dict[str, Any], str]:
        text: list[str] = []
        reply = self.client.execute_interactive(code, timeout=60, output_hook=lambda message: text.append(
            message["content"]["text"]) if message["msg_type"] == "stream" else None, **kwargs)
        return reply["content"], "".join(text)

    def said(self, text: str) -> str:
        assert self.replay.stdout is not None
        for line in self.replay.stdout:
            if text in line:
                return line
        pytest.fail(f"the replay ended without saying {text!r}")


@contextmanager
def interactive_replay(replay: subprocess.Popen[str]) -> Iterator[AttachedReplay]:
    """Attach to the kernel `cellgate replay --interactive` offers (through the connection file it prints).
    Unless the test ended it, the replay is then stopped with Ctrl-C; either way it must exit 0."""
    assert replay.stdout is not None
    connection_file = None
    for line in replay.stdout:
        if "jupyter console --existing" in line:
            connection_file = line.split("--existing", 1)[1].strip()
            break
    assert connection_file and Path(connection_file).is_file()
    client = BlockingKernelClient(connection_file=connection_file)
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        yield AttachedReplay(replay, client)
    finally:
        client.stop_channels()
    if replay.poll() is None:
        replay.send_signal(signal.SIGINT)
    assert replay.wait(60) == 0


# The frameworks' tests (tests/integrations; their shared constants are in tests/integrations/frameworks.py).
@pytest.fixture(scope="module")
def northwind() -> ModuleType:
    """The example's tools module, imported on the host (its functions are what a framework is given)."""
    spec = importlib.util.spec_from_file_location("northwind_tools", NORTHWIND / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its annotations are strings (PEP 563): resolved in the module's namespace
    spec.loader.exec_module(module)
    return module


INTEGRATION_EXAMPLES = NORTHWIND.parent / "integrations"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import an example of docs/integrations (examples/integrations/NAME.py) as the docs page shows it."""
    monkeypatch.syspath_prepend(str(INTEGRATION_EXAMPLES))

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"integration_example_{name}", INTEGRATION_EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
