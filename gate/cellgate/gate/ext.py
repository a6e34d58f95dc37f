"""What extension authors import from the gate, besides the public face (``cellgate.gate``).

The contract: an extension (``cellgate.extensions.*``, the JupyterLab server extension, a third party's package
registered through cellgate's entry points) imports ``cellgate.gate`` and ``cellgate.gate.ext`` and nothing else
of the gate (import-linter checks cellgate's own). The names below, with their signatures, are what cellgate
keeps stable for extensions: changing one is changing this contract, on purpose and with its callers. The modules
behind them are private and move without notice: import a name from here, never from where it is defined.

- Config sections (``cellgate.config_sections``): ``StrictModel`` (unknown keys rejected), ``find_config``
  (the ``--config`` / ``CELLGATE_CONFIG`` / ``./cellgate.toml`` search a command makes).
- Tool sources (``cellgate.tool_sources``): ``ToolSource``, ``open_sources``/``close_sources`` for a process
  that serves tools without a Session, ``RESERVED_TOOL_NAMES`` and ``stub_signature`` for showing a tool.
- Agent loops and tracing (``cellgate.telemetry``): ``Telemetry``, ``CallSpan``, ``ModelTurn``, ``CallRecord``.
- Showing text to a model, a terminal or a notebook: ``trim``, ``clean_for_terminal``, ``reveal_for_terminal``,
  ``untrusted_markdown``, ``waiting_notices``.
- Journal events (``cellgate.journal_events``): ``Recorder``, ``CellRecord``, ``JournalEventRun``.
- Sandbox backends (``cellgate.sandbox_backends``): ``SandboxBackend``, ``SandboxHandle``, ``SandboxRequest``,
  ``SandboxStatus``, ``MemoryWatch``, ``SandboxLimits``, ``CURVE_SERVER_KEY``, ``sandbox_kernel_environment``,
  ``sandbox_owner_record`` and ``sandbox_owner_state`` (one record of who owns a sandbox, and whether it lives).
- Signing a server's own state: ``load_host_key`` (this host's key: ``mac(data, purpose)``, ``check``).
- Budgets of a lineage (a session, its forks, trials, pool members and resumed sessions): ``lineage_of(session)``,
  ``Lineage`` (``take(name, limit, what)`` counts atomically across processes, ``held()``, ``left(limit)``,
  ``share(budget, limit)``, ``record()``/``from_record``) and ``BudgetRefused``.
- Review servers (what the JupyterLab extension reads): ``verify_run``, ``blob_text``, ``ArtifactError``,
  ``pending_approval(s)``, ``answer_approval``, ``sandbox_owner_alive``, ``KERNEL_LAUNCHER_MODULE``,
  ``UntrustedLaunchState``, ``kernel_recording``.

Lazy like the face: a name's module is imported on its first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cellgate.gate import _lazy

if TYPE_CHECKING:  # the names for type checkers; at run time they are imported lazily
    from cellgate.gate._hostkey import load as load_host_key
    from cellgate.gate._model import StrictModel
    from cellgate.gate._terminal import clean as clean_for_terminal
    from cellgate.gate._terminal import reveal as reveal_for_terminal
    from cellgate.gate.audit.artifacts import ArtifactError, blob_text
    from cellgate.gate.audit.cells import CellRecord
    from cellgate.gate.audit.events import Run as JournalEventRun
    from cellgate.gate.audit.recorder import Recorder
    from cellgate.gate.audit.sanitize import untrusted_markdown
    from cellgate.gate.audit.verify import check_run as verify_run
    from cellgate.gate.calls.approval_queue import answer as answer_approval
    from cellgate.gate.calls.approval_queue import pending_request as pending_approval
    from cellgate.gate.calls.approval_queue import pending_requests as pending_approvals
    from cellgate.gate.calls.lineage import BudgetRefused, Lineage, lineage_of
    from cellgate.gate.calls.record import CallRecord
    from cellgate.gate.calls.redaction import trim
    from cellgate.gate.calls.sources import ToolSource, close_sources, open_sources
    from cellgate.gate.calls.stubgen import RESERVED as RESERVED_TOOL_NAMES
    from cellgate.gate.calls.stubgen import signature as stub_signature
    from cellgate.gate.config import find_config
    from cellgate.gate.ops.waiting import waiting_notices
    from cellgate.gate.sandbox.backend import (
        CURVE_SERVER_KEY,
        MemoryWatch,
        SandboxBackend,
        SandboxHandle,
        SandboxLimits,
        SandboxRequest,
        SandboxStatus,
    )
    from cellgate.gate.sandbox.environment import kernel_environment as sandbox_kernel_environment
    from cellgate.gate.sandbox.kernelspec import LAUNCHER_MODULE as KERNEL_LAUNCHER_MODULE
    from cellgate.gate.sandbox.liveness import owner_alive as sandbox_owner_alive
    from cellgate.gate.sandbox.liveness import owner_state as sandbox_owner_state
    from cellgate.gate.sandbox.liveness import this_process as sandbox_owner_record
    from cellgate.gate.session.launcher_state import UntrustedState as UntrustedLaunchState
    from cellgate.gate.session.launcher_state import recording as kernel_recording
    from cellgate.gate.session.live import Checkpoint, read_checkpoint
    from cellgate.gate.session.session import Trial
    from cellgate.gate.telemetry import CallSpan, ModelTurn, Telemetry

# name here -> "module" (same name there) or "module:name"
_EXT = {
    # config sections
    "StrictModel": "cellgate.gate._model",
    "find_config": "cellgate.gate.config",
    # tool sources
    "ToolSource": "cellgate.gate.calls.sources",
    "open_sources": "cellgate.gate.calls.sources",
    "close_sources": "cellgate.gate.calls.sources",
    "RESERVED_TOOL_NAMES": "cellgate.gate.calls.stubgen:RESERVED",
    "stub_signature": "cellgate.gate.calls.stubgen:signature",
    # agent loops and tracing
    "Telemetry": "cellgate.gate.telemetry",
    "CallSpan": "cellgate.gate.telemetry",
    "ModelTurn": "cellgate.gate.telemetry",
    "CallRecord": "cellgate.gate.calls.record",
    # showing text
    "trim": "cellgate.gate.calls.redaction",
    "clean_for_terminal": "cellgate.gate._terminal:clean",
    "reveal_for_terminal": "cellgate.gate._terminal:reveal",
    "untrusted_markdown": "cellgate.gate.audit.sanitize",
    "waiting_notices": "cellgate.gate.ops.waiting",
    # journal events
    "Recorder": "cellgate.gate.audit.recorder",
    "CellRecord": "cellgate.gate.audit.cells",
    "JournalEventRun": "cellgate.gate.audit.events:Run",
    # sandbox backends
    "SandboxBackend": "cellgate.gate.sandbox.backend",
    "SandboxHandle": "cellgate.gate.sandbox.backend",
    "SandboxRequest": "cellgate.gate.sandbox.backend",
    "SandboxStatus": "cellgate.gate.sandbox.backend",
    "MemoryWatch": "cellgate.gate.sandbox.backend",
    "CURVE_SERVER_KEY": "cellgate.gate.sandbox.backend",
    "SandboxLimits": "cellgate.gate.sandbox.backend",
    "sandbox_kernel_environment": "cellgate.gate.sandbox.environment:kernel_environment",
    "sandbox_owner_record": "cellgate.gate.sandbox.liveness:this_process",
    "sandbox_owner_state": "cellgate.gate.sandbox.liveness:owner_state",
    # review servers
    "verify_run": "cellgate.gate.audit.verify:check_run",
    "blob_text": "cellgate.gate.audit.artifacts",
    "ArtifactError": "cellgate.gate.audit.artifacts",
    "pending_approval": "cellgate.gate.calls.approval_queue:pending_request",
    "pending_approvals": "cellgate.gate.calls.approval_queue:pending_requests",
    "answer_approval": "cellgate.gate.calls.approval_queue:answer",
    "sandbox_owner_alive": "cellgate.gate.sandbox.liveness:owner_alive",
    "KERNEL_LAUNCHER_MODULE": "cellgate.gate.sandbox.kernelspec:LAUNCHER_MODULE",
    "UntrustedLaunchState": "cellgate.gate.session.launcher_state:UntrustedState",
    "kernel_recording": "cellgate.gate.session.launcher_state:recording",
    # live sessions (``Session.checkpoint``, ``resume``, ``fork``, ``trial``)
    "Checkpoint": "cellgate.gate.session.live",
    "read_checkpoint": "cellgate.gate.session.live",
    "Trial": "cellgate.gate.session.session",
    # signing a server's own state
    "load_host_key": "cellgate.gate._hostkey:load",
    # budgets of a lineage
    "BudgetRefused": "cellgate.gate.calls.lineage",
    "Lineage": "cellgate.gate.calls.lineage",
    "lineage_of": "cellgate.gate.calls.lineage",
}

__all__ = [
    "CURVE_SERVER_KEY",
    "KERNEL_LAUNCHER_MODULE",
    "RESERVED_TOOL_NAMES",
    "ArtifactError",
    "BudgetRefused",
    "CallRecord",
    "CallSpan",
    "CellRecord",
    "Checkpoint",
    "JournalEventRun",
    "Lineage",
    "MemoryWatch",
    "ModelTurn",
    "Recorder",
    "SandboxBackend",
    "SandboxHandle",
    "SandboxLimits",
    "SandboxRequest",
    "SandboxStatus",
    "StrictModel",
    "Telemetry",
    "ToolSource",
    "Trial",
    "UntrustedLaunchState",
    "answer_approval",
    "blob_text",
    "clean_for_terminal",
    "close_sources",
    "find_config",
    "kernel_recording",
    "lineage_of",
    "load_host_key",
    "open_sources",
    "pending_approval",
    "pending_approvals",
    "read_checkpoint",
    "reveal_for_terminal",
    "sandbox_kernel_environment",
    "sandbox_owner_alive",
    "sandbox_owner_record",
    "sandbox_owner_state",
    "stub_signature",
    "trim",
    "untrusted_markdown",
    "verify_run",
    "waiting_notices",
]
assert sorted(__all__) == sorted(_EXT)

# Hidden from type checkers, which see the imports above: a name that is not there is an error for them too.
if not TYPE_CHECKING:
    __getattr__ = _lazy(__name__, _EXT, globals())


def __dir__() -> list[str]:
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
