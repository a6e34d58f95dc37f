"""Approvers: who answers when the policy says a call needs approval.

An ``Approver`` is looked up by name in the ``cellgate.approvers`` entry-point
group (the built-ins are registered the same way): ``deny`` (the default),
``allow``, ``prompt`` (a terminal prompt), ``queue`` (pending requests as
files that ``cellgate approvals`` answers from another terminal, in ``approval_queue``). Library
users can pass any callable as ``Session(approver=...)``.

An approval is bound to one call: session, the gate's sequence number, the
tool and the sha256 of the canonical arguments. It is used once.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import io
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.text import Text

from cellgate.gate._entry_points import entry_points
from cellgate.gate._errors import ConfigError
from cellgate.gate._json import canonical_json, digest
from cellgate.gate._terminal import head_and_tail, reveal

ENTRY_POINT_GROUP = "cellgate.approvers"


@dataclass(frozen=True)
class ApprovalRequest:
    id: str  # f"{session}-{seq}"
    session: str
    seq: int
    tool: str
    args: dict[str, Any]
    args_sha256: str
    cell_line: int | None
    source_line: str | None
    requested: float  # host clock, epoch seconds
    deadline: float
    # The host process that waits for the answer ({"pid", "start_time"}); a request whose owner is gone is withdrawn.
    owner: dict[str, Any] | None = None
    # Whom the session acts for (an authenticated principal of `cellgate mcp serve`); None for a local session.
    principal: str | None = None


@dataclass(frozen=True)
class ApprovalAnswer:
    decision: Literal["allow", "deny"]
    approver: str
    reason: str = ""
    answered: float = 0.0


class Approver(abc.ABC):
    """Answers approval requests.

    ``ask`` is called by the gate on its event loop, once per call that needs
    approval, and may be awaited concurrently for parallel calls. It returns
    an answer, or raises ``TimeoutError`` when the request's deadline passes
    (the gate then denies with ``approval-timeout``). Subclasses need not call
    ``super()``.
    """

    name = "approver"

    @abc.abstractmethod
    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer: ...

    def withdraw(self, request: ApprovalRequest, reason: str) -> None:
        """The request's cell ended (``reason``: how) while it waited; ``ask`` is cancelled too.

        Called on the gate's loop; the default does nothing. An approver that
        shows requests elsewhere takes them away here.
        """

    def close(self) -> None:
        """Called when the session ends."""


class DenyApprover(Approver):
    name = "deny"

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer("deny", self.name, "no approver is configured ([policy] approver = 'deny')", time.time())


class AllowApprover(Approver):
    name = "allow"

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer("allow", self.name, "auto-approved ([policy] approver = 'allow')", time.time())


class CallbackApprover(Approver):
    """Wraps a callable(request) -> bool | ApprovalAnswer (sync or async)."""

    name = "callback"

    def __init__(self, callback: Callable[[ApprovalRequest], Any]) -> None:
        self.callback = callback

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        if inspect.iscoroutinefunction(self.callback):
            answer = await self.callback(request)
        else:
            answer = await asyncio.to_thread(self.callback, request)
        if isinstance(answer, ApprovalAnswer):
            return answer
        return ApprovalAnswer("allow" if answer is True else "deny", self.name, "", time.time())


ARGS_SHOWN = 1500  # characters of escaped arguments the short view shows (head and tail)


def describe_request(request: ApprovalRequest) -> str:
    """What a person sees: every hidden or look-alike code point escaped, long arguments head and tail.

    The arguments are what the gate validated (secrets as their digests or markers); the cell line is
    the kernel's claim, and the program text shown at it is the host's own copy of the program.
    """
    args = json.dumps(request.args, ensure_ascii=False, sort_keys=True)
    lines = [
        f"tool:      {reveal(request.tool)}",
        *([f"asked by:  principal {reveal(request.principal)}"] if request.principal else []),
        f"arguments: {head_and_tail(args, ARGS_SHOWN, f'`cellgate approvals show {reveal(request.id)}` prints all')}",
        f"sha256:    {reveal(request.args_sha256)} (of the arguments; the approval is bound to it)",
    ]
    if request.cell_line is not None:
        lines.append(f"cell line {request.cell_line} (reported by the kernel): {reveal(request.source_line or '')}")
    return "\n".join(lines)


def describe_full(request: ApprovalRequest) -> tuple[str, bool]:
    """`cellgate approvals show`: the complete arguments, every hidden code point escaped and nothing
    folded, and whether their digest is the one the approval is bound to."""
    text = json.dumps(request.args, ensure_ascii=False, sort_keys=True, indent=2)
    args_sha256 = args_digest(request.args)
    matches = args_sha256 == request.args_sha256
    lines = [
        f"request:   {reveal(request.id)} (session {reveal(request.session)}, call {request.seq})",
        f"tool:      {reveal(request.tool)}",
        *([f"asked by:  principal {reveal(request.principal)}"] if request.principal else []),
        "arguments (complete; every invisible, format, bidi and non-ASCII space character escaped):",
        *("  " + reveal(line, compress=False) for line in text.split("\n")),
        f"sha256:    {args_sha256} ({len(canonical_json(request.args).encode()):,} bytes of canonical JSON)",
    ]
    if not matches:
        lines.append(f"MISMATCH:  the request names the digest {reveal(request.args_sha256)}; "
                     "these are not the arguments the approval would be bound to: deny it")
    if request.cell_line is not None:
        lines.append(f"cell line {request.cell_line} (reported by the kernel): "
                     f"{reveal(request.source_line or '', compress=False)}")
    return "\n".join(lines), matches


class PromptApprover(Approver):
    """Asks on the controlling terminal, one request at a time."""

    name = "prompt"

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def _ask_blocking(self, request: ApprovalRequest) -> ApprovalAnswer:
        # A terminal is not seekable, so it is opened unbuffered ("r+" through open() would fail to seek).
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        with self._lock, io.TextIOWrapper(io.FileIO(fd, "r+"), write_through=True) as tty:
            console = Console(file=tty, highlight=False)
            console.print(Text.assemble(("approval needed", "bold yellow"), f" (request {reveal(request.id)})"))
            console.print(Text(describe_request(request)))
            console.print("allow this call? [y/N] ", end="", markup=False)
            tty.flush()
            reply = tty.readline().strip().lower()
        return ApprovalAnswer("allow" if reply in ("y", "yes") else "deny", self.name,
                              "answered at the terminal", time.time())

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        remaining = request.deadline - time.time()
        async with asyncio.timeout(max(remaining, 0)):  # not wait_for: see dispatch._run
            return await asyncio.to_thread(self._ask_blocking, request)


def args_digest(args: dict[str, Any]) -> str:
    return digest(args)


def load_approver(spec: str | Approver | Callable[..., Any]) -> Approver:
    """An approver by entry-point name, an Approver instance, or a callback."""
    if isinstance(spec, Approver):
        return spec
    if callable(spec):
        return CallbackApprover(spec)
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if spec not in found:
        raise ConfigError(f"[policy] approver = {spec!r} is not a known approver; choose one of: "
                          f"{', '.join(sorted(found)) or 'deny, allow, prompt, queue'}")
    approver_class = found[spec].load()
    return approver_class()  # type: ignore[no-any-return]


__all__ = [
    "Approver", "ApprovalRequest", "ApprovalAnswer", "DenyApprover", "AllowApprover", "PromptApprover",
    "CallbackApprover", "load_approver", "describe_request", "describe_full", "args_digest",
]
