"""One line under a cell's network error: the sandbox has no network, a loopback of its own, and one way out.

A ``Connection refused`` on 127.0.0.1 reads as if the user's server (on the host) were down; it is not there at
all. The error is shown as IPython shows it, with a note (PEP 678) that says why and what reaches the outside.
"""

from __future__ import annotations

import errno
import socket
from types import TracebackType
from typing import Any, Final

HINT: Final = ("cellgate: this sandbox has no network, and its own loopback (127.0.0.1 and localhost are the "
               "sandbox, not your machine): raw TCP, UDP, SSH and SMTP reach nothing. HTTP(S) reaches the outside "
               "only through the gate's proxy (the HTTP_PROXY the sandbox sets; a client that ignores it gets "
               "nowhere), as [[network.allow]] in cellgate.toml allows (`cellgate network check URL`), or through "
               "the session's tools (`tools`)")
# What a connection attempt ends in when there is no network or nothing listens on the sandbox's own loopback.
NETWORK_ERRNOS: Final = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN,
                                   errno.EADDRNOTAVAIL, errno.ECONNRESET})
CHAIN_DEPTH: Final = 16  # of causes and contexts looked through (requests and urllib wrap the socket's error)


def is_network_error(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from or while handling, is a failed connection or lookup."""
    seen: list[BaseException] = []
    pending: list[Any] = [error]
    while pending and len(seen) < CHAIN_DEPTH:
        item = pending.pop()
        if not isinstance(item, BaseException) or any(item is s for s in seen):
            continue
        seen.append(item)
        if isinstance(item, socket.gaierror) or (isinstance(item, OSError) and item.errno in NETWORK_ERRNOS):
            return True
        pending.extend((item.__cause__, item.__context__, getattr(item, "reason", None)))  # urllib: .reason
    return False


def show(shell: Any, etype: type[BaseException], value: BaseException, tb: TracebackType | None,
         tb_offset: int | None = None) -> None:
    """IPython's custom exception handler for OSError: the usual traceback, with the hint for a network error."""
    if is_network_error(value) and HINT not in getattr(value, "__notes__", ()):
        value.add_note(HINT)
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def register(shell: Any) -> None:
    shell.set_custom_exc((OSError,), show)
