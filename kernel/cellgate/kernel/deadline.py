"""A deadline for work on the kernel's main thread that must not hold up the cells behind it.

Completion runs on the shell's main thread, so a cell sent meanwhile waits
behind it; jedi can take long (a huge module to infer, an object whose
``__dir__`` never returns). ``deadline(seconds)`` raises ``DeadlineExpired``
in the thread that entered it once the time is up, as an asynchronous
exception (delivered at its next Python instruction). It derives from
``BaseException`` so that ``except Exception`` in jedi does not swallow it
(IPython's completer does catch it around each matcher and goes on with the
next: ``Deadline.expired`` tells the caller either way); no exception is left
pending once the block has ended.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class DeadlineExpired(BaseException):
    """The work took longer than its deadline and was stopped."""


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


class Deadline:
    def __init__(self) -> None:
        self.expired = False  # DeadlineExpired was raised in the block (whether or not something caught it)
        self.ended = False


@contextmanager
def deadline(seconds: float) -> Iterator[Deadline]:
    """Stop the block with ``DeadlineExpired`` if it runs longer than ``seconds``."""
    target = threading.get_ident()
    lock = threading.Lock()
    state = Deadline()

    def expire() -> None:
        with lock:
            if not state.ended:
                state.expired = True
                _raise_in(target, DeadlineExpired)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield state
    finally:
        timer.cancel()
        with lock:
            state.ended = True
            _raise_in(target, None)  # one set but not yet delivered is dropped here
