"""The host side of cellgate: sandbox launcher, gate, recorder, Session and CLI.

Public API::

    from cellgate.gate import Session, CellResult, Tool, ToolRegistry, Settings

It is also all that extensions (``cellgate.extensions.*``) and the JupyterLab
extension's server side may import from the gate (import-linter contracts):
tool sources, config sections, the helpers an agent loop or a server needs to
show text to a model or a terminal, and what a reviewer's views read (a run's
verification, its blobs, the approvals waiting).

The face is lazy: importing a room (``cellgate.gate.calls.policy``) does not
import jupyter_client or the Session, so the CLI's light commands start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names for type checkers; at run time the face imports them lazily
    from cellgate.gate._errors import (
        CellgateError,
        ConfigError,
        FileRefused,
        FileTooLarge,
        KernelDied,
        PoolExhausted,
        RecordExists,
        SandboxError,
        SandboxUnavailable,
        SessionError,
        SourceUnavailable,
    )
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
    from cellgate.gate.calls.dispatch import Secret
    from cellgate.gate.calls.record import CallRecord
    from cellgate.gate.calls.redaction import trim
    from cellgate.gate.calls.registry import Tool, ToolRegistry, tool_from_function
    from cellgate.gate.calls.sources import ToolSource, close_sources, open_sources
    from cellgate.gate.calls.stubgen import RESERVED as RESERVED_TOOL_NAMES
    from cellgate.gate.calls.stubgen import signature as stub_signature
    from cellgate.gate.config import Settings, find_config, load_settings
    from cellgate.gate.ops.waiting import waiting_notices
    from cellgate.gate.sandbox.backend import (
        CURVE_SERVER_KEY,
        MemoryWatch,
        SandboxBackend,
        SandboxHandle,
        SandboxRequest,
        SandboxStatus,
    )
    from cellgate.gate.sandbox.backend import endpoint as sandbox_endpoint
    from cellgate.gate.sandbox.backend import kernel_environment as sandbox_kernel_environment
    from cellgate.gate.sandbox.container import owner_alive as sandbox_owner_alive
    from cellgate.gate.sandbox.kernelspec import LAUNCHER_MODULE as KERNEL_LAUNCHER_MODULE
    from cellgate.gate.sandbox.oci import Limits as SandboxLimits
    from cellgate.gate.session.launcher_state import LaunchState as KernelLaunchState
    from cellgate.gate.session.launcher_state import UntrustedState as UntrustedLaunchState
    from cellgate.gate.session.launcher_state import recording as kernel_recording
    from cellgate.gate.session.commands import CommandResult
    from cellgate.gate.session.files import FileRecord
    from cellgate.gate.session.pool import Pool
    from cellgate.gate.session.session import CellResult, Session
    from cellgate.gate.telemetry import CallSpan, ModelTurn, Telemetry

# name on the face -> "module" (same name there) or "module:name"
_FACE = {
    "ArtifactError": "cellgate.gate.audit.artifacts",
    "CallRecord": "cellgate.gate.calls.record",
    "CallSpan": "cellgate.gate.telemetry",
    "CellRecord": "cellgate.gate.audit.cells",
    "CellResult": "cellgate.gate.session.session",
    "CURVE_SERVER_KEY": "cellgate.gate.sandbox.backend",
    "CellgateError": "cellgate.gate._errors",
    "CommandResult": "cellgate.gate.session.commands",
    "FileRecord": "cellgate.gate.session.files",
    "FileRefused": "cellgate.gate._errors",
    "FileTooLarge": "cellgate.gate._errors",
    "ConfigError": "cellgate.gate._errors",
    "JournalEventRun": "cellgate.gate.audit.events:Run",
    "KernelDied": "cellgate.gate._errors",
    "KERNEL_LAUNCHER_MODULE": "cellgate.gate.sandbox.kernelspec:LAUNCHER_MODULE",
    "KernelLaunchState": "cellgate.gate.session.launcher_state:LaunchState",
    "ModelTurn": "cellgate.gate.telemetry",
    "MemoryWatch": "cellgate.gate.sandbox.backend",
    "Pool": "cellgate.gate.session.pool",
    "PoolExhausted": "cellgate.gate._errors",
    "RESERVED_TOOL_NAMES": "cellgate.gate.calls.stubgen:RESERVED",
    "RecordExists": "cellgate.gate._errors",
    "Recorder": "cellgate.gate.audit.recorder",
    "SandboxBackend": "cellgate.gate.sandbox.backend",
    "SandboxError": "cellgate.gate._errors",
    "SandboxHandle": "cellgate.gate.sandbox.backend",
    "SandboxLimits": "cellgate.gate.sandbox.oci:Limits",
    "SandboxRequest": "cellgate.gate.sandbox.backend",
    "SandboxStatus": "cellgate.gate.sandbox.backend",
    "SandboxUnavailable": "cellgate.gate._errors",
    "Secret": "cellgate.gate.calls.dispatch",
    "Session": "cellgate.gate.session.session",
    "SessionError": "cellgate.gate._errors",
    "Settings": "cellgate.gate.config",
    "Telemetry": "cellgate.gate.telemetry",
    "SourceUnavailable": "cellgate.gate._errors",
    "StrictModel": "cellgate.gate._model",
    "Tool": "cellgate.gate.calls.registry",
    "UntrustedLaunchState": "cellgate.gate.session.launcher_state:UntrustedState",
    "answer_approval": "cellgate.gate.calls.approval_queue:answer",
    "blob_text": "cellgate.gate.audit.artifacts",
    "ToolRegistry": "cellgate.gate.calls.registry",
    "ToolSource": "cellgate.gate.calls.sources",
    "clean_for_terminal": "cellgate.gate._terminal:clean",
    "close_sources": "cellgate.gate.calls.sources",
    "find_config": "cellgate.gate.config",
    "kernel_recording": "cellgate.gate.session.launcher_state:recording",
    "load_settings": "cellgate.gate.config",
    "open_sources": "cellgate.gate.calls.sources",
    "pending_approval": "cellgate.gate.calls.approval_queue:pending_request",
    "pending_approvals": "cellgate.gate.calls.approval_queue:pending_requests",
    "reveal_for_terminal": "cellgate.gate._terminal:reveal",
    "sandbox_owner_alive": "cellgate.gate.sandbox.container:owner_alive",
    "sandbox_endpoint": "cellgate.gate.sandbox.backend:endpoint",
    "sandbox_kernel_environment": "cellgate.gate.sandbox.backend:kernel_environment",
    "stub_signature": "cellgate.gate.calls.stubgen:signature",
    "tool_from_function": "cellgate.gate.calls.registry",
    "trim": "cellgate.gate.calls.redaction",
    "untrusted_markdown": "cellgate.gate.audit.sanitize",
    "verify_run": "cellgate.gate.audit.verify:check_run",
    "waiting_notices": "cellgate.gate.ops.waiting",
}

__all__ = [
    "untrusted_markdown",  # text nobody checked (a model's) as a markdown cell may show it
    "ArtifactError", "CURVE_SERVER_KEY", "CallRecord", "CallSpan", "CellRecord", "CellResult", "CellgateError",
    "CommandResult", "FileRecord", "FileRefused", "FileTooLarge",  # Session.run_command, upload, download
    "ConfigError", "JournalEventRun", "KernelDied", "MemoryWatch", "ModelTurn", "Pool", "PoolExhausted",
    "RESERVED_TOOL_NAMES", "RecordExists", "Recorder", "SandboxBackend", "SandboxError", "SandboxHandle", "SandboxLimits",
    "SandboxRequest", "SandboxStatus", "SandboxUnavailable", "Secret", "Session", "SessionError", "Settings",
    "SourceUnavailable", "StrictModel", "Telemetry", "Tool", "ToolRegistry", "ToolSource", "answer_approval",
    "blob_text", "clean_for_terminal", "close_sources", "find_config", "load_settings", "open_sources",
    "pending_approval", "pending_approvals", "reveal_for_terminal", "sandbox_endpoint",
    "sandbox_kernel_environment", "sandbox_owner_alive", "stub_signature", "tool_from_function", "trim",
    "verify_run", "waiting_notices",
    "KERNEL_LAUNCHER_MODULE", "KernelLaunchState", "UntrustedLaunchState", "kernel_recording",  # live kernels' records
]
assert sorted(__all__) == sorted(_FACE)


def __getattr__(name: str) -> Any:
    where = _FACE.get(name)
    if where is None:
        raise AttributeError(f"module 'cellgate.gate' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
