"""A command the host asked to run (``Session.run_command``): a child process of the kernel, its output as the cell's.

The host sends a cell that calls ``run(argv, timeout)``; the host records it as a cell of kind ``command`` with
its argv. No shell: ``argv`` is executed as given. The child's stdout and stderr are copied to the cell's
streams as they come (so the cell's output limits apply), then its exit code is shown as one display output
``exit code N``, which the host reads back. A timeout, or the cell's interruption (the cell timeout, a
Ctrl-C), kills the child's whole process group.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import threading
from typing import IO, Any

READ_BYTES = 64 << 10
EXIT_PREFIX = "exit code "


class CommandTimeout(TimeoutError):
    """The command did not exit within the timeout it was given; it was killed."""


def _copy(source: IO[bytes], stream: Any) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd = source.fileno()
    while True:
        chunk = os.read(fd, READ_BYTES)
        if not chunk:
            break
        stream.write(decoder.decode(chunk))
    tail = decoder.decode(b"", final=True)
    if tail:
        stream.write(tail)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the command's process group (its own session): nothing it started outlives it, and
    nothing left holds its pipes open."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def _show_exit(code: int) -> None:
    from IPython.display import publish_display_data

    sys.stdout.flush()
    sys.stderr.flush()
    publish_display_data({"text/plain": f"{EXIT_PREFIX}{code}"})


def run(argv: list[str], timeout: float | None = None) -> None:
    """Run ``argv`` (no shell), copying its output to the cell; show its exit code."""
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    assert child.stdout is not None and child.stderr is not None
    # Threads inherit the cell (kernel.threads_inherit_the_cell): what they write is this cell's output.
    copiers = [threading.Thread(target=_copy, args=(pipe, stream), name="cellgate-command", daemon=True)
               for pipe, stream in ((child.stdout, sys.stdout), (child.stderr, sys.stderr))]
    for copier in copiers:
        copier.start()
    try:
        try:
            code: int | None = child.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        _kill_group(child)
        for copier in copiers:
            copier.join()
        _show_exit(child.returncode if code is None else code)
        if code is None:
            raise CommandTimeout(f"the command {argv[0]!r} did not exit within {timeout:g} s and was killed")
    except BaseException:  # interrupted (the cell timeout, Ctrl-C): the child does not outlive its cell
        _kill_group(child)
        raise
    finally:
        child.stdout.close()
        child.stderr.close()
