"""What a session is launched with, typed end to end.

``Session`` builds one frozen ``LaunchOptions`` and hands it to the
provisioner as ``start_kernel(cellgate=options)`` (jupyter_client passes
``start_kernel``'s keywords on to the provisioner's ``pre_launch``); a plain
frontend passes none and gets the defaults. The provisioner turns the options
and the settings into the launch parameters here, with pure functions.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Protocol, TypedDict

from pydantic import ValidationError

from cellgate.gate._errors import ConfigError
from cellgate.gate._model import validation_problems
from cellgate.gate._versions import versions
from cellgate.gate.audit.journal import Journal
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.calls.approval import ApprovalRequest, Approver
from cellgate.gate.calls.dispatch import CallLog, Dispatcher
from cellgate.gate.calls.policy import Policy, policy_sha256
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.calls.sources import ToolSource, describe_sources
from cellgate.gate.config import CONFIG_NAME, SandboxSettings, Settings, find_config, load_settings
from cellgate.gate.sandbox.backend import Restore

# An approver: an entry-point name ("deny", "allow", "prompt", "queue"), an instance, or a
# callable(request) -> bool | ApprovalAnswer (sync or async).
ApproverSpec = str | Approver | Callable[[ApprovalRequest], Any]
# Opens the session's journal at the path it is given (``Journal`` itself, or a subclass).
JournalFactory = Callable[[Path], Journal]


class RecorderFactory(Protocol):
    """Makes the session's recorder (``Recorder`` itself, or a subclass)."""

    def __call__(self, notebook_path: Path, session_metadata: dict[str, Any],
                 open_journal: JournalFactory = ...) -> Recorder: ...


class GateFactory(Protocol):
    """Makes the session's gate (``Dispatcher`` itself, or a subclass such as replay's)."""

    def __call__(self, registry: ToolRegistry, *, log: CallLog, policy: Policy, approver: Approver,
                 session_id: str, call_timeout: float) -> Dispatcher: ...


class SandboxOverrides(TypedDict, total=False):
    """``[sandbox]`` settings a caller may override per session (None: keep the configured value)."""

    backend: str | None
    image: str | None
    runsc: str | None
    platform: Literal["systrap", "ptrace", "kvm"] | None
    memory_mb: int | None
    pids: int | None
    cpus: float | None
    open_files: int | None
    tmp_mb: int | None
    workspace: str | None
    workspace_mb: int | None
    cell_timeout: float | None
    interrupt_grace: float | None
    call_timeout: float | None
    start_timeout: float | None
    require_hard_limits: bool | None
    cgroup_parent: str | None
    output_limit_kb: int | None
    file_limit_mb: int | None
    pool: int | None
    snapshot: bool | None
    max_message_mb: int | None
    max_refusals_per_cell: int | None
    restricted: bool | None
    allowed_imports: list[str] | None


@dataclass(frozen=True)
class LaunchOptions:
    """A session's launch options, from ``Session`` to the provisioner."""

    settings: Settings | None = None  # used as is (replay: the operator's, looked up once); else found from config
    config: str | None = None
    tools: tuple[str, ...] = ()  # tool modules granted by the caller: allowed unless [policy] names them
    notebook: Path | None = None
    sandbox: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))  # SandboxSettings fields
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # merged into the record's
    # Seams: what the session is made of, when not the defaults.
    registry: ToolRegistry | None = None  # given: no configured tools or sources are loaded
    sources: tuple[ToolSource, ...] = ()  # opened with the session, closed when it ends
    approver: ApproverSpec | None = None  # else [policy] approver
    gate_factory: GateFactory = Dispatcher
    recorder_factory: RecorderFactory = Recorder
    journal_factory: JournalFactory = Journal
    # A package layer even when [packages] allows nothing: a replay puts a run's recorded wheels back into it.
    package_layer: bool = False
    # Told by the relay, on its thread: a frontend's shutdown_request (its content), and the kernel's end (as
    # journalled: kernel-exited, kernel-died or kernel-killed). The kernelspec's launcher ends on them.
    on_shutdown: Callable[[dict[str, Any]], None] | None = None
    on_kernel_end: Callable[[str], None] | None = None
    # The session's first kernel continues this live checkpoint instead of starting fresh (``session.live``).
    restore: Restore | None = None


def settings_for(options: LaunchOptions, cwd: str | None) -> Settings:
    settings = options.settings or load_settings(find_config(options.config, cwd), cwd)
    overrides = {k: v for k, v in options.sandbox.items() if v is not None}
    # A relative workspace is the config file's (as [tools] modules are), or the session's working directory's
    # when passed as an option: runsc would resolve it against whatever its own working directory is.
    if settings.sandbox.workspace:
        settings = settings.model_copy(update={"sandbox": settings.sandbox.model_copy(
            update={"workspace": str(settings.resolve(settings.sandbox.workspace))})})
    workspace = overrides.get("workspace")
    if isinstance(workspace, str):
        overrides["workspace"] = str((Path(cwd or os.getcwd()) / os.path.expanduser(workspace)).resolve())
    if overrides:
        try:  # validated like the file's own [sandbox] table
            sandbox = SandboxSettings.model_validate({**settings.sandbox.model_dump(exclude_unset=True), **overrides})
        except ValidationError as exc:
            raise ConfigError(f"sandbox options: {'; '.join(validation_problems(exc))}") from None
        settings = settings.model_copy(update={"sandbox": sandbox})
    return settings


def session_metadata(settings: Settings, registry: ToolRegistry, runtime: Mapping[str, Any], tool_paths: Sequence[Path],
                     session_id: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """What the record says about the session before its first cell (``runtime``: the backend's ``runtime()``)."""
    box = settings.sandbox
    sandbox = {
        "isolation": box.isolation,
        **runtime,
        "limits": {"memory_mb": box.memory_mb, "pids": box.pids, "cpus": box.cpus, "open_files": box.open_files,
                   "tmp_mb": box.tmp_mb, "cell_timeout_s": box.cell_timeout,
                   "interrupt_grace_s": box.interrupt_grace, "call_timeout_s": box.call_timeout,
                   "max_message_mb": box.max_message_mb, "max_refusals_per_cell": box.max_refusals_per_cell},
        "network": "none",
        "restricted": ({"allowed_imports": sorted(box.allowed_imports)} if box.restricted else False),
    }
    sandbox.update(runtime)  # the backend's word on what it runs (network, limits_enforced) replaces the defaults
    return {
        "session_id": session_id,
        "versions": versions(),
        "python": platform.python_version(),
        "sandbox": sandbox,
        "config": {"file": settings.source, "base_dir": settings.base_dir},
        "tools": {"manifest": registry.manifest(), "manifest_sha256": registry.manifest_sha256(),
                  "sources": [str(p) for p in tool_paths] + describe_sources(settings)},
        "policy": {"policy": settings.policy.model_dump(mode="json"), "sha256": policy_sha256(settings.policy)},
        # Read back by the Reducer: the notebook shows outputs as sanitized under these settings.
        "frontend": {"outputs": "sanitized", "trusted_mime": list(settings.frontend.trusted_mime),
                     "allow_comms": settings.frontend.allow_comms},
        **extra,
    }


def where_it_records(recorder: Recorder) -> list[str]:
    """The configuration a session runs with and where its record goes, as a person is told them: in the kernel's
    banner (``relaywire``) and on ``cellgate exec``'s stderr. Host paths: never sent into the sandbox."""
    config = recorder.metadata.get("config")
    config = config if isinstance(config, dict) else {}
    tools = recorder.metadata.get("tools")
    has_tools = isinstance(tools, dict) and bool(tools.get("manifest"))
    folder = Path(str(config.get("base_dir") or "."))
    if config.get("file"):
        lines = [f"cellgate config: {config['file']}"]
        if not has_tools:
            lines.append("no tools are configured: its [tools] modules list is empty (see README, Configuration)")
    else:
        lines = [f"cellgate config: none (no {CONFIG_NAME} in {folder}, and CELLGATE_CONFIG is not set)"]
        if not has_tools:
            lines.append(f"no tools are configured: create {folder / CONFIG_NAME} with a [tools] modules list "
                         "(see README, Configuration), then start a new kernel")
    return [*lines, f"cellgate audit notebook: {recorder.notebook_path}"]
