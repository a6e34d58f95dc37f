"""CellgateSandboxClient: the Agents SDK's sandbox client, each session a cellgate session."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import secrets
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from agents import FunctionTool, function_tool
from agents.sandbox.capabilities import Capability
from agents.sandbox.errors import ExecTimeoutError, WorkspaceReadNotFoundError
from agents.sandbox.manifest import Manifest
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
from agents.sandbox.types import ExecResult, User
from agents.tool import Tool as AgentsTool
from agents.tool_context import ToolContext

from cellgate.gate import ConfigError, Session, SessionError, Tool, ToolRegistry

ARCHIVE_DIR = "/tmp"  # the sandbox's other writable folder (the workspace is what is archived)


class CellgateSandboxClientOptions(BaseSandboxClientOptions):
    """Options of one sandbox session; the client's own ``session_options`` say how cellgate runs it."""

    type: Literal["cellgate"] = "cellgate"


class CellgateSandboxSessionState(SandboxSessionState):
    type: Literal["cellgate"] = "cellgate"
    notebook: str | None = None  # the audit notebook of the cellgate session it last ran in


class CellgateSandboxSession(BaseSandboxSession):
    """One cellgate session behind the SDK's sandbox session interface."""

    state: CellgateSandboxSessionState

    def __init__(self, *, state: CellgateSandboxSessionState, cellgate: Session) -> None:
        self.state = state
        self.cellgate = cellgate  # the cellgate.gate.Session it runs in
        self.notebook_path = cellgate.notebook_path  # its audit notebook, there after the session ends
        # The SDK may run tools in parallel; cellgate moves no file while a cell (a command) runs: one at a time.
        self._turn = asyncio.Lock()

    async def _exec_internal(self, *command: str | Path, timeout: float | None = None) -> ExecResult:
        argv = [str(part) for part in command]
        async with self._turn:
            result = await self.cellgate.run_command(argv, timeout=timeout)
        if result.status == "timeout":
            raise ExecTimeoutError(command=argv, timeout_s=timeout)
        return ExecResult(stdout=result.stdout.encode(), stderr=result.stderr.encode(), exit_code=result.exit_code)

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        _one_user(user)
        where = self.normalize_path(path)
        try:
            async with self._turn:
                return io.BytesIO(await self.cellgate.download(str(where)))
        except SessionError as exc:  # FileRefused, known by its code (the face keeps the errors' base classes)
            if exc.code == "file-refused" and ("no such file" in str(exc).lower() or "not found" in str(exc).lower()):
                raise WorkspaceReadNotFoundError(path=where) from exc
            raise

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        _one_user(user)
        payload = data.read()
        content = payload.encode() if isinstance(payload, str) else bytes(payload)
        async with self._turn:
            await self.cellgate.upload(str(self.normalize_path(path, for_write=True)), content)

    async def running(self) -> bool:
        return not self.cellgate.dead

    async def persist_workspace(self) -> io.IOBase:
        """The workspace as a tar with workspace-relative members (the SDK's portable form)."""
        archive = f"{ARCHIVE_DIR}/workspace-{secrets.token_hex(8)}.tar"
        skipped = [f"--exclude=./{p.as_posix()}" for p in sorted(self._persist_workspace_skip_relpaths())]
        async with self._turn:
            await self._checked(["tar", "-C", self.state.manifest.root, *skipped, "-cf", archive, "."])
            try:
                return io.BytesIO(await self.cellgate.download(archive))
            finally:
                await self._checked(["rm", "-f", archive])

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        archive = f"{ARCHIVE_DIR}/workspace-{secrets.token_hex(8)}.tar"
        payload = data.read()
        async with self._turn:
            await self.cellgate.upload(archive, payload.encode() if isinstance(payload, str) else bytes(payload))
            try:
                root = self.state.manifest.root
                await self._checked(["mkdir", "-p", root])
                # --no-same-owner, and tar's own refusal of absolute and ../ members: the archive stays in the root.
                await self._checked(["tar", "-C", root, "--no-same-owner", "-xf", archive])
            finally:
                await self._checked(["rm", "-f", archive])

    async def _shutdown_backend(self) -> None:
        if not self.cellgate.dead:
            await self.cellgate.shutdown()

    async def _checked(self, argv: list[str]) -> None:
        result = await self.cellgate.run_command(argv)
        if result.exit_code != 0:
            raise RuntimeError(f"{' '.join(argv)} failed in the sandbox (exit {result.exit_code}): "
                               f"{result.stderr.strip()[:500]}")


def _one_user(user: str | User | None) -> None:
    if user is not None:
        name = user if isinstance(user, str) else user.name
        raise ConfigError(f"a cellgate sandbox has one user; it cannot act as {name!r}: leave run_as unset")


class CellgateSandboxClient(BaseSandboxClient[CellgateSandboxClientOptions]):
    """Creates, resumes and deletes sandbox sessions, each a cellgate session.

    ``tools`` are host functions (typed, with docstrings, as cellgate's tool modules): handed over by the program
    that owns the agent, they are allowed unless the config's ``[policy.tools.NAME]`` says otherwise. The agent
    gets them through ``capability()``. ``session_options`` are ``cellgate.gate.Session``'s arguments
    (``config``, ``notebook``, ``cwd``, ...).
    """

    backend_id = "cellgate"
    supports_default_options = True

    def __init__(self, *, tools: Sequence[Callable[..., Any]] = (), **session_options: Any) -> None:
        self.tools = list(tools)
        self.session_options = session_options
        self.sessions: list[CellgateSandboxSession] = []  # every one this client made, newest last

    def capability(self) -> CellgateTools:
        """The client's tools as an agent capability: each call goes through the session's gate."""
        return CellgateTools(functions=self.tools)

    async def create(self, *, snapshot: SnapshotSpec | SnapshotBase | None = None, manifest: Manifest | None = None,
                     options: CellgateSandboxClientOptions | None = None) -> SandboxSession:
        manifest = self._validate_manifest_for_create(manifest if manifest is not None else Manifest())
        session_id = uuid.uuid4()
        state = CellgateSandboxSessionState(session_id=session_id, manifest=manifest,
                                            snapshot=resolve_snapshot(snapshot, str(session_id)))
        return self._wrap_session(await self._open(state))

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """A new cellgate session for the state; the SDK's start hydrates its workspace from the snapshot."""
        if not isinstance(state, CellgateSandboxSessionState):
            raise ConfigError(f"CellgateSandboxClient resumes cellgate sandbox states, not {type(state).__name__}")
        return self._wrap_session(await self._open(state))

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, CellgateSandboxSession):
            raise ConfigError(f"CellgateSandboxClient deletes its own sessions, not {type(inner).__name__}")
        if not inner.cellgate.dead:
            await inner.cellgate.shutdown()
        return session

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return CellgateSandboxSessionState.model_validate(payload)

    async def _open(self, state: CellgateSandboxSessionState) -> CellgateSandboxSession:
        gated = [dataclasses.replace(Tool.from_function(fn, source="openai-agents"), default_decision="allow")
                 for fn in self.tools]
        # WORKAROUND until Session(tools=[callables]) (API.md) is merged: the tools as a registry of their own.
        cellgate = Session(registry=ToolRegistry(gated), **self.session_options)
        await cellgate.start()
        state.notebook = str(cellgate.notebook_path)
        session = CellgateSandboxSession(state=state, cellgate=cellgate)
        self.sessions.append(session)
        return session


class CellgateTools(Capability):
    """Host functions as the agent's function tools; each call is decided and recorded by the cellgate gate of
    the sandbox session the run is bound to, and runs on the host only when allowed."""

    type: str = "cellgate_tools"
    functions: list[Any] = []

    def tools(self) -> list[AgentsTool]:
        return [self._gated(fn) for fn in self.functions]

    def _gated(self, fn: Callable[..., Any]) -> FunctionTool:
        described = function_tool(fn)  # the SDK's own schema and description of the function
        name = described.name

        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            inner = getattr(self.session, "_inner", self.session)
            if not isinstance(inner, CellgateSandboxSession):
                raise ConfigError(f"{name}: CellgateTools needs the run's sandbox to be a CellgateSandboxClient's")
            args = json.loads(arguments) if arguments else {}
            outcome = await inner.cellgate.call_tool(name, args)
            if not outcome.ok:
                error: Mapping[str, str] = outcome.error or {}
                return f"{outcome.error_name}: {error.get('message', 'the call failed')}"
            return json.dumps(outcome.result)

        return FunctionTool(name=name, description=described.description,
                            params_json_schema=described.params_json_schema, on_invoke_tool=invoke,
                            strict_json_schema=described.strict_json_schema)
