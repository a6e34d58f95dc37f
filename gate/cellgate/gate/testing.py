"""Test seams shipped as public API (as httpx ships MockTransport).

``BlockingSession`` is ``SyncSession`` (the public blocking session) under
the name the tests use.
``ScriptedApprover`` answers approval requests from a script and keeps what
it was asked; ``FakeToolSource`` serves in-memory tools as a tool source
does (``Session(approver=..., sources=[...])``).
(The Anthropic Messages API's fake is ``cellgate.extensions.anthropic.testing``.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Literal

from typing_extensions import override

from cellgate.gate.audit.calls_view import CALLS_MIME, calls_output, is_host_output
from cellgate.gate.calls.approval import ApprovalAnswer, ApprovalRequest, Approver
from cellgate.gate.calls.registry import Tool, tool_from_function
from cellgate.gate.calls.sources import ToolSource
from cellgate.gate.config import Settings
from cellgate.gate.session.sync import SyncSession


class BlockingSession(SyncSession):
    """The name tests have long used for ``SyncSession`` (one implementation: ``session/sync.py``)."""


# --------------------------------------------------------------------------
# A scripted approver and an in-memory tool source.

# One scripted answer: "allow"/"deny", True (allow)/False (deny), or a whole ApprovalAnswer.
ScriptedAnswer = Literal["allow", "deny"] | bool | ApprovalAnswer


class ScriptedApprover(Approver):
    """Answers approval requests from a script, and keeps every request it was asked.

    ``script`` is either a sequence whose items answer one request each, in
    order, or a callable(request) -> answer asked every time. When a sequence
    runs out, the request is denied with a reason saying so (a test that asks
    more than it scripted sees it, never hangs). ``asked`` and ``withdrawn``
    are appended to on the gate's loop; read them after the cell ended.
    """

    name = "scripted"

    def __init__(self, script: Sequence[ScriptedAnswer] | Callable[[ApprovalRequest], ScriptedAnswer]) -> None:
        self._answer = script if callable(script) else None
        self._script = list(script) if not callable(script) else []
        self.asked: list[ApprovalRequest] = []
        self.withdrawn: list[tuple[ApprovalRequest, str]] = []

    @override
    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        if self._answer is not None:
            answer = self._answer(request)
        elif self._script:
            answer = self._script.pop(0)
        else:
            return ApprovalAnswer("deny", self.name, f"the approver's script is exhausted (request "
                                  f"{len(self.asked)}, tool {request.tool!r})", time.time())
        if isinstance(answer, ApprovalAnswer):
            return answer
        decision: Literal["allow", "deny"] = "allow" if answer is True or answer == "allow" else "deny"
        return ApprovalAnswer(decision, self.name, "scripted", time.time())

    @override
    def withdraw(self, request: ApprovalRequest, reason: str) -> None:
        self.withdrawn.append((request, reason))


class FakeToolSource(ToolSource):
    """A tool source serving in-memory tools: functions (described from their signatures) or ``Tool``s.

    ``decision`` is the functions' default decision when the policy names
    them, as a real source's annotation would be (None: ``[policy] default``).
    ``opened`` and ``closed`` count the provisioner's calls; ``notes`` are
    journalled as a real source's are.
    """

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]], *, settings: Settings | None = None,
                 decision: Literal["allow", "deny", "approve"] | None = None,
                 notes: Iterable[dict[str, Any]] = ()) -> None:
        super().__init__(settings or Settings())
        self.tools = [item if isinstance(item, Tool)
                      else replace(tool_from_function(item, source="fake"), default_decision=decision)
                      for item in tools]
        self.notes = [dict(note) for note in notes]
        self.opened = 0
        self.closed = 0

    @override
    def open(self) -> list[Tool]:
        self.opened += 1
        return list(self.tools)

    @override
    def close(self) -> None:
        self.closed += 1


# Values that differ between two runs of the same script: times, durations, random ids, hashes of them.
VOLATILE_KEYS = frozenset({"started", "ended", "time", "duration_ms", "session_id", "journal", "id",
                           "idempotency_key", "requested", "answered", "versions", "sandbox", "cellgate_version"})


def normalize_notebook(nb: Any) -> dict[str, Any]:
    """An audit notebook with run-specific values replaced, for golden comparisons of scripted runs."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict) and is_host_output(value):  # its table shows times: rendered from clean calls
            value = calls_output(clean(value["data"][CALLS_MIME]["calls"]))
        if isinstance(value, dict):
            return {k: ("<volatile>" if k in VOLATILE_KEYS else clean(v)) for k, v in sorted(value.items())}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    data = json.loads(json.dumps(nb))
    return {"metadata": clean(data.get("metadata", {}).get("cellgate", {}).get("agent")),
            "cells": [clean({"cell_type": c["cell_type"], "source": c["source"], "outputs": c.get("outputs"),
                             "metadata": c.get("metadata", {})}) for c in data["cells"]]}
