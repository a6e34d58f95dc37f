"""The installed kernelspec's kernel process: ``python -m cellgate.gate.session.launcher -f CONNECTION_FILE``.

A frontend in any environment (JupyterLab, VS Code, nbclient, a Kernel
Gateway, with nothing of cellgate installed) launches it as it launches any
kernel. It drives the in-process ``cellgate-gvisor`` provisioner on the
frontend's connection file, so the one relay binds exactly the frontend's
ports and key, and the sandbox, gate and recorder are the ones ``Session``
gets. Config comes as for any frontend: ``CELLGATE_CONFIG`` or the
``cellgate.toml`` of the working folder.

One process serves one kernel, as any kernel process does:

- interrupts arrive as ``interrupt_request`` (``interrupt_mode: message``)
  and the relay forwards them; a SIGINT interrupts the running cell too and
  never ends the launcher;
- a ``shutdown_request`` lets the kernel exit; the launcher then ends the
  record, deletes the sandbox and exits 0; SIGTERM (or the frontend's process
  going away) ends it the same way, killing the kernel;
- a kernel that dies or that the host kills ends the process (exit 1), so the
  frontend's restarter notices and starts a new one;
- a restart is a new process on the same connection file: it continues the
  same audit notebook (``launcher_state`` says which, ``audit.resume``
  continues it), with a "kernel restarted" note.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import signal
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from cellgate.gate._startup import defer_slow_imports

defer_slow_imports()  # first: nbformat's jsonschema would load its slow format checkers at import (seconds)

from jupyter_client.manager import AsyncKernelManager  # noqa: E402

from cellgate.gate._errors import CellgateError, ConfigError, JournalError
from cellgate.gate.audit.journal import Journal
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.audit.resume import Previous, read_previous, resume, setup_changes
from cellgate.gate.calls.approval import Approver
from cellgate.gate.calls.dispatch import CallLog, Dispatcher
from cellgate.gate.calls.lineage import Lineage
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.sandbox.kernelspec import KERNEL_NAME, LAUNCHER_MODULE, CellgateSpecManager
from cellgate.gate.session import launcher_state
from cellgate.gate.session.launch import LaunchOptions
from cellgate.gate.session.launcher_state import Ending, LaunchState, UntrustedState
from cellgate.gate.session.provisioner import GVisorProvisioner

PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
MAX_CONNECTION_FILE_BYTES = 64 << 10
# Why the next launcher's kernel was restarted, by how the last one ended (None: it stopped without saying).
RESTART_REASONS: dict[Ending | None, str] = {"restart": "frontend", "kernel-died": "kernel-died",
                                             "kernel-killed": "kernel-killed", "stopped": "stopped",
                                             None: "host-stopped"}


def say(text: str) -> None:
    print(f"cellgate launcher: {text}", file=sys.stderr, flush=True)


def read_connection_file(path: Path) -> dict[str, Any]:
    """The frontend's connection info, checked: ports, ip, transport, key and an HMAC-SHA256 signature scheme."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONNECTION_FILE_BYTES + 1)
        info = json.loads(raw) if len(raw) <= MAX_CONNECTION_FILE_BYTES else None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"connection file {path} cannot be read: {exc}") from None
    problems = []
    if not isinstance(info, dict):
        raise ConfigError(f"connection file {path} is not a JSON object of at most "
                          f"{MAX_CONNECTION_FILE_BYTES >> 10} KB; the frontend writes it, pass its path with -f")
    if info.get("transport", "tcp") not in ("tcp", "ipc"):
        problems.append(f"transport {info.get('transport')!r} (tcp or ipc)")
    if not isinstance(info.get("ip"), str) or not info["ip"]:
        problems.append(f"ip {info.get('ip')!r}")
    if not isinstance(info.get("key"), str):
        problems.append("key (a string)")
    if info.get("signature_scheme", "hmac-sha256") != "hmac-sha256":
        problems.append(f"signature_scheme {info.get('signature_scheme')!r} (only hmac-sha256)")
    if "curve_publickey" in info or "curve_secretkey" in info:
        problems.append("CurveZMQ keys (transport encryption is not supported by this kernel)")
    for port in PORTS:
        value = info.get(port)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
            problems.append(f"{port} {value!r}")
    if problems:
        raise ConfigError(f"connection file {path}: unusable {', '.join(problems)}")
    return info


class RecordChoice:
    """Continue the previous launcher's record, or start a new one that names it (the session's factories)."""

    def __init__(self, previous: Previous | None, reason: str, not_continued: dict[str, Any] | None) -> None:
        self.previous = previous
        self.reason = reason
        self.link = not_continued  # why a previous record was not continued, for the new one's metadata
        self.continued = False

    def recorder(self, notebook_path: Path, session_metadata: dict[str, Any],
                 open_journal: Any = Journal) -> Recorder:
        previous = self.previous
        if previous is not None:
            changed = setup_changes(previous.metadata, session_metadata)
            if not changed:
                self.continued = True
                return resume(previous, self.reason, Recorder, open_journal)
            self.link = {"path": str(previous.notebook), "restart": self.reason,
                         "not_continued": f"the session's setup changed: {', '.join(changed)}"}
            say(f"not continuing {previous.notebook}: {self.link['not_continued']}")
        metadata = {**session_metadata, "previous_notebook": self.link} if self.link else session_metadata
        return Recorder(notebook_path, metadata, open_journal=open_journal)

    def gate(self, registry: ToolRegistry, *, log: CallLog, policy: Policy, approver: Approver,
             session_id: str, call_timeout: float) -> Dispatcher:
        first_seq = 1
        if self.continued and self.previous is not None:  # the record's own session goes on
            session_id = str(self.previous.metadata.get("session_id", session_id))
            first_seq = self.previous.next_call_seq
        gate = Dispatcher(registry, log=log, policy=policy, approver=approver, session_id=session_id,
                          call_timeout=call_timeout, first_seq=first_seq)
        if self.continued and self.previous is not None:  # its budgets and idempotency keys go on too
            gate.lineage = Lineage.journalled(self.previous.records) or gate.lineage
        return gate


def choose_record(state: LaunchState | None, connection_file: Path) -> RecordChoice:
    """What the last launcher on this connection file left: a record to continue, or none."""
    if state is None or state.connection_file != str(connection_file.resolve()):
        return RecordChoice(None, "", None)
    reason = RESTART_REASONS[state.ended]
    try:
        return RecordChoice(read_previous(Path(state.notebook)), reason, None)
    except JournalError as exc:
        say(f"starting a new audit notebook: the previous one cannot be continued: {exc}")
        return RecordChoice(None, reason, {"path": state.notebook, "restart": reason, "not_continued": str(exc)})


class Launcher:
    def __init__(self, connection_file: Path) -> None:
        self.connection_file = connection_file
        self.info = read_connection_file(connection_file)
        self.state_path = launcher_state.state_path(connection_file)
        self.done = asyncio.Event()
        self.kernel_end: str | None = None  # how the kernel ended, as journalled (the relay's on_kernel_end)
        self.shutdown: dict[str, Any] | None = None  # the frontend's shutdown_request content
        self.provisioner: GVisorProvisioner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._interrupts: set[asyncio.Task[None]] = set()  # each awaited before the launcher ends

    async def serve(self) -> int:
        with ExitStack() as stack:
            self._lock(stack)
            trusted, state = self._load_state()
            choice = choose_record(state, self.connection_file)
            self._loop = loop = asyncio.get_running_loop()
            private = stack.enter_context(tempfile.TemporaryDirectory(prefix="cellgate-launcher-"))
            self._signals(loop)
            km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=CellgateSpecManager(),
                                    cache_ports=False)
            # The provisioner's own copy of the connection file: the frontend's is never rewritten or removed.
            km.connection_file = str(Path(private, "connection.json"))
            km.load_connection_info(self.info)  # type: ignore[arg-type]
            # The relay tells this launcher (on its thread) of a frontend's shutdown_request and of the kernel's end.
            options = LaunchOptions(recorder_factory=choice.recorder, gate_factory=choice.gate,
                                    on_shutdown=self._shutdown_requested,
                                    on_kernel_end=self._kernel_ended_soon)
            try:
                await km.start_kernel(cellgate=options, cwd=os.getcwd())
            except BaseException:
                if isinstance(km.provisioner, GVisorProvisioner):
                    await km.provisioner.cleanup(restart=False)
                raise
            assert isinstance(km.provisioner, GVisorProvisioner)
            self.provisioner = provisioner = km.provisioner
            started = provisioner.started
            notebook = started.recorder.notebook_path
            say(("continuing" if choice.continued else "recording to") + f" the audit notebook {notebook}")
            if trusted:
                launcher_state.save(self.state_path, LaunchState(str(self.connection_file.resolve()), str(notebook),
                                                                 None))
            await self.done.wait()
            await asyncio.gather(*self._interrupts)  # each reports its own failure
            ending = self._ending()
            if trusted:  # first: the frontend kills a kernel process that takes long to exit
                self._save_ending(ending, notebook)
            # The provisioner's cleanup detaches the relay, ends the record and deletes the sandbox (killing a
            # kernel still running): no interrupt or separate kill first, each a runsc call the frontend waits on.
            await km.cleanup_resources(restart=False)
        return 1 if ending in ("kernel-died", "kernel-killed") else 0

    # -------------------------------------------------------------- the end
    def _shutdown_requested(self, content: dict[str, Any]) -> None:
        """A frontend asked the kernel to shut down (on the relay's thread); the relay expects the exit."""
        self.shutdown = content

    def _kernel_ended_soon(self, event: str) -> None:
        """The relay says the kernel's process ended (on its thread): the launcher ends on its own loop."""
        assert self._loop is not None  # the relay starts within serve()
        self._loop.call_soon_threadsafe(self._kernel_ended, event)

    def _kernel_ended(self, event: str) -> None:
        self.kernel_end = event
        self.done.set()

    def _stop(self) -> None:
        """SIGTERM or SIGHUP, or the frontend's process went away: end as a killed kernel process would."""
        self.done.set()

    def _ending(self) -> Ending | None:
        """How this kernel ended (None: a full shutdown the frontend asked for)."""
        if self.shutdown is not None:
            return "restart" if self.shutdown.get("restart") is True else None
        if self.kernel_end == "kernel-died":
            return "kernel-died"
        if self.kernel_end == "kernel-killed":
            return "kernel-killed"
        return "stopped"

    def _save_ending(self, ending: Ending | None, notebook: Path) -> None:
        if ending is None:  # a full shutdown: nothing to continue
            launcher_state.remove(self.state_path)
        else:
            launcher_state.save(self.state_path, LaunchState(str(self.connection_file.resolve()), str(notebook),
                                                             ending))

    # -------------------------------------------------------------- signals and state
    def _signals(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGTERM, self._stop)
        loop.add_signal_handler(signal.SIGHUP, self._stop)
        loop.add_signal_handler(signal.SIGINT, self._interrupt)
        parent = os.environ.get("JPY_PARENT_PID", "")
        if parent.isdigit() and int(parent) > 1:  # as ipykernel does: end with the frontend that started it
            try:
                fd = os.pidfd_open(int(parent))
            except OSError:
                self._stop()  # already gone
                return
            loop.add_reader(fd, self._stop)

    def _interrupt(self) -> None:
        """SIGINT: interrupt the running cell (Jupyter may send it); it never ends the launcher."""
        if self.provisioner is None:
            return
        task = asyncio.get_running_loop().create_task(self._interrupt_cell(self.provisioner))
        self._interrupts.add(task)
        task.add_done_callback(self._interrupts.discard)

    @staticmethod
    async def _interrupt_cell(provisioner: GVisorProvisioner) -> None:
        try:
            await provisioner.interrupt()
        except Exception as exc:  # the launcher goes on; the interrupt's failure is said, never dropped
            say(f"the interrupt failed: {type(exc).__name__}: {exc}")

    def _lock(self, stack: ExitStack) -> None:
        """Lock the connection file for the process's life: one launcher serves a kernel (and writes its record)."""
        try:
            fd = os.open(self.connection_file, os.O_RDONLY)
        except OSError as exc:
            raise ConfigError(f"connection file {self.connection_file} cannot be opened: {exc}") from None
        stack.callback(os.close, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"another cellgate launcher is serving {self.connection_file}; one kernel process "
                              "per connection file") from None

    def _load_state(self) -> tuple[bool, LaunchState | None]:
        """(whether the restart state can be used, the last launcher's state on this connection file)."""
        try:
            launcher_state.prune(self.state_path.parent)
            return True, launcher_state.load(self.state_path)
        except UntrustedState as exc:
            say(f"the restart state is not used ({exc}); a restart will start a new audit notebook")
            return False, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {LAUNCHER_MODULE}",
        description="The cellgate kernel process a Jupyter frontend launches: the gVisor sandbox, the gate and the "
                    "audit notebook, served on the frontend's connection file.")
    parser.add_argument("-f", dest="connection_file", required=True, help="the frontend's connection file")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(Launcher(Path(args.connection_file)).serve())
    except CellgateError as exc:
        say(str(exc))
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
