"""``Session.run_command``: a command run in the sandbox, recorded as a cell of kind ``command``.

The host sends a cell it generated, which runs ``argv`` as a child of the kernel (``cellgate.kernel.commands``: no
shell unless argv names one). Before sending it, the session tells the relay the cell's msg_id, argv and code
(``PendingCommands``); the relay records the cell as kind ``command`` with its argv, and the program it shows is
``$ <argv>``, never the generated Python, which is fixed by the argv and the timeout. A cell that claims that
msg_id with any other code is recorded as the code it is. The cell timeout, the output limits and interrupts
bound it as they bound any cell. What comes back is the sandbox's (hostile): the output as the cell's outputs,
the exit code read from the one ``exit code N`` display output, bounded.
"""

from __future__ import annotations

import re
import shlex
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cellgate.gate._errors import SessionError

if TYPE_CHECKING:
    from cellgate.gate.audit.cells import CellRecord

MAX_ARGV_ITEMS = 4096
MAX_ARGV_BYTES = 128 << 10
MAX_PENDING = 64
_EXIT = re.compile(r"^exit code (-?[0-9]{1,10})$")
TIMED_OUT = "CommandTimeout"  # the kernel's error when the command outlived its own timeout


@dataclass(frozen=True)
class CommandResult:
    """What one command did: its argv, exit code (-1 when it did not exit on its own and none was reported),
    stdout, stderr, and the cell's status (``timeout`` also when the command's own ``timeout`` passed)."""

    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    status: str

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.exit_code == 0


def checked_argv(argv: object) -> list[str]:
    """``argv`` as a list of strings, or a SessionError saying what is wrong with it."""
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)):
        raise SessionError(f"run_command takes argv as a list of strings, not {type(argv).__name__} "
                           f"{str(argv)[:100]!r}; for a shell line pass ['sh', '-c', LINE]")
    if not argv:
        raise SessionError("run_command got an empty argv; pass the program and its arguments, e.g. ['ls', '-l']")
    items = list(argv)
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise SessionError(f"argv[{index}] is {type(item).__name__} {str(item)[:100]!r}, not a string; "
                               "pass every argument as a str")
        if "\0" in item:
            raise SessionError(f"argv[{index}] {item[:100]!r} holds a NUL character, which no argument can hold")
    size = sum(len(item.encode("utf-8", "surrogatepass")) for item in items)
    if len(items) > MAX_ARGV_ITEMS or size > MAX_ARGV_BYTES:
        raise SessionError(f"argv has {len(items)} items and {size} bytes, over the limit of {MAX_ARGV_ITEMS} items "
                           f"and {MAX_ARGV_BYTES} bytes; upload a script (session.upload) and run that instead")
    return items


def checked_timeout(timeout: float | None, cell_timeout: float) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= cell_timeout:
        raise SessionError(f"run_command's timeout is {timeout!r}; it must be a number of seconds above 0 and at "
                           f"most [sandbox] cell_timeout = {cell_timeout:g} (the cell that runs it ends there)")
    return float(timeout)


def command_code(argv: list[str], timeout: float | None) -> str:
    """The cell the host sends: Python literals only, so it is a function of argv and timeout alone."""
    return f"__import__('cellgate.kernel.commands', fromlist=['run']).run({argv!r}, {timeout!r})"


def command_source(argv: list[str]) -> str:
    """The program a reader of the record sees for the command."""
    return "$ " + shlex.join(argv)


def exit_code(outputs: list[dict[str, Any]]) -> int | None:
    """The exit code the kernel reported (the last ``exit code N`` display output), or None."""
    for output in reversed(outputs):
        if output.get("output_type") != "display_data":
            continue
        text = (output.get("data") or {}).get("text/plain")
        found = _EXIT.match(text) if isinstance(text, str) else None
        if found:
            return int(found.group(1))
    return None


def stream_text(outputs: list[dict[str, Any]], name: str) -> str:
    return "".join(str(o.get("text", "")) for o in outputs if o.get("output_type") == "stream" and o.get("name") == name)


def command_result(argv: list[str], record: CellRecord) -> CommandResult:
    outputs = [dict(o) for o in record.outputs]
    status = str(record.status)
    if status == "error" and (record.error or {}).get("ename") == TIMED_OUT:
        status = "timeout"
    code = exit_code(outputs)
    return CommandResult(argv=list(argv), exit_code=-1 if code is None else code,
                         stdout=stream_text(outputs, "stdout"), stderr=stream_text(outputs, "stderr"), status=status)


class PendingCommands:
    """The commands the session sent and the relay has not yet seen: host state, never what a message claims."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[list[str], str]] = {}

    def expect(self, msg_id: str, argv: list[str], code: str) -> None:
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                raise SessionError(f"{MAX_PENDING} commands are already waiting to be sent; wait for one to end")
            self._pending[msg_id] = (list(argv), code)

    def forget(self, msg_id: str) -> None:
        with self._lock:
            self._pending.pop(msg_id, None)

    def claim(self, msg_id: str, code: str) -> list[str] | None:
        """The argv of the command cell ``msg_id`` if it is one and its code is the generated one, else None."""
        with self._lock:
            found = self._pending.pop(msg_id, None)
        if found is None or found[1] != code:
            return None
        return found[0]


__all__ = ["CommandResult", "PendingCommands", "checked_argv", "command_code", "command_result", "command_source"]
