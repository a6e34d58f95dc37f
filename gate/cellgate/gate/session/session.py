"""``Session``: the library API for running cells in a sandboxed, gated, recorded kernel.

A thin layer over ``jupyter_client``: it launches the ``cellgate`` kernelspec
(so it uses exactly the provisioner, gate and recorder every other Jupyter
frontend gets), sends cells, and returns each cell's record::

    async with Session(tools=["tools.py"], notebook="run.ipynb") as session:
        result = await session.execute("print(tools.list_orders('2026-10')[:1])")
        print(result.status, result.text)
"""

from __future__ import annotations

import asyncio
import queue
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_client import AsyncKernelManager

from cellgate.gate._errors import KernelDied, SessionError
from cellgate.gate.audit.recorder import CellRecord, Recorder
from cellgate.gate.calls.direct import DirectResult
from cellgate.gate.calls.dispatch import CallRecord
from cellgate.gate.calls.policy import Policy
from cellgate.gate.sandbox.kernelspec import KERNEL_NAME, CellgateSpecManager
from cellgate.gate.session.provisioner import GVisorProvisioner

# Evaluated by the kernel after each cell (a Jupyter user_expression), so that after a
# restart the notebook can say which variables were lost. Kernel output: never trusted
# beyond being a list of identifiers.
NAMES = "cellgate_names"
NAMES_EXPRESSION = ("' '.join(sorted(n for n in globals() if n.isidentifier() and not n.startswith('_') "
                    "and n not in get_ipython().user_ns_hidden))")
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,99}$")


def variable_names(reply_content: dict[str, Any]) -> list[str] | None:
    """The names a reply's user_expression listed (at most 200 identifiers), or None."""
    found = (reply_content.get("user_expressions") or {}).get(NAMES) if isinstance(reply_content, dict) else None
    if not isinstance(found, dict) or found.get("status") != "ok":
        return None
    text = (found.get("data") or {}).get("text/plain")
    if not isinstance(text, str) or len(text) > 20_000 or len(text) < 2 or text[0] not in "'\"":
        return None
    return [name for name in text[1:-1].split() if _IDENTIFIER.match(name)][:200]


@dataclass(frozen=True)
class CellResult:
    """What one cell did: status, outputs (nbformat dicts) and its gated calls."""

    status: str
    outputs: list[dict[str, Any]]
    calls: list[CallRecord]
    execution_count: int | None
    limits_hit: list[str]
    error: dict[str, str] | None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def stdout(self) -> str:
        return "".join(o["text"] for o in self.outputs if o.get("output_type") == "stream" and o.get("name") == "stdout")

    @property
    def text(self) -> str:
        """Plain text of everything the cell showed, in order."""
        parts = []
        for output in self.outputs:
            kind = output.get("output_type")
            if kind == "stream":
                parts.append(output["text"])
            elif kind in ("execute_result", "display_data"):
                plain = output.get("data", {}).get("text/plain")
                if plain:
                    parts.append(plain + "\n")
            elif kind == "error":
                parts.append(f"{output.get('ename')}: {output.get('evalue')}\n")
        return "".join(parts)

    @classmethod
    def from_record(cls, record: CellRecord) -> CellResult:
        return cls(
            status=str(record.status), outputs=[dict(o) for o in record.outputs],
            calls=sorted(record.call_records, key=lambda c: c.seq), execution_count=record.execution_count,
            limits_hit=list(record.limits_hit), error=record.error,
        )


class Session:
    """One sandboxed kernel with its tools, gate and audit notebook."""

    def __init__(
        self,
        *,
        config: str | Path | None = None,
        tools: list[str | Path] | tuple[str | Path, ...] = (),
        notebook: str | Path | None = None,
        isolation: str | None = None,
        cwd: str | Path | None = None,
        approver: Any = None,
        registry: Any = None,
        gate_factory: Any = None,
        metadata: dict[str, Any] | None = None,
        settings: Any = None,
        **sandbox: Any,
    ) -> None:
        self._options = {
            "settings": settings,  # a parsed Settings, used as is (replay: the operator's, looked up once)
            "approver": approver,
            "registry": registry,
            "gate_factory": gate_factory,
            "metadata": metadata,
            "config": str(config) if config else None,
            "tools": [str(t) for t in tools],
            "notebook": str(notebook) if notebook else None,
            "sandbox": {"isolation": isolation, **sandbox},
        }
        self._cwd = str(cwd) if cwd else None
        self.km: AsyncKernelManager | None = None
        self._names: list[str] | None = None  # the user's variables after the last cell, if the kernel said
        self._client: Any = None
        self.dead = False

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> Session:
        if self.km is not None:
            raise SessionError("this session is already started; use a new Session for another sandbox")
        self.km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=CellgateSpecManager())
        kwargs: dict[str, Any] = {"cellgate": self._options}
        if self._cwd:
            kwargs["cwd"] = self._cwd
        try:
            await self.km.start_kernel(**kwargs)
        except BaseException:
            await self._cleanup_failed_start()
            raise
        try:
            await self._connect()
        except BaseException:  # the kernel died before answering: leave nothing behind
            if self._client is not None:
                self._client.stop_channels()
                self._client = None
            await self.km.shutdown_kernel(now=True)
            self.km = None
            raise
        return self

    async def _cleanup_failed_start(self) -> None:
        provisioner = self.km.provisioner if self.km else None
        if isinstance(provisioner, GVisorProvisioner):
            await provisioner.cleanup(restart=False)

    async def _connect(self) -> None:
        assert self.km is not None
        self._client = self.km.client()
        self._client.start_channels(iopub=False, stdin=False, hb=False, control=False)
        await self._client.wait_for_ready(timeout=60)
        self.dead = False

    async def restart(self) -> None:
        """Start a fresh sandboxed kernel in the same session (variables are gone)."""
        assert self.km is not None
        if self._client is not None:
            self._client.stop_channels()
        await self.km.restart_kernel(now=True)
        await self._connect()

    @property
    def connection_file(self) -> str:
        """The frontend connection file: `jupyter console --existing` it to attach."""
        assert self.km is not None
        return str(self.km.connection_file)

    async def shutdown(self) -> None:
        if self.km is None:
            return
        if self._client is not None:
            self._client.stop_channels()
            self._client = None
        if await self.km.is_alive():
            await self.km.shutdown_kernel(now=False)
        else:
            await self.km.shutdown_kernel(now=True)
        self.km = None

    async def __aenter__(self) -> Session:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # -------------------------------------------------------------- running
    @property
    def provisioner(self) -> GVisorProvisioner:
        if self.km is None or not isinstance(self.km.provisioner, GVisorProvisioner):
            raise SessionError("the session is not started; call start() or use `async with`")
        return self.km.provisioner

    @property
    def notebook_path(self) -> Path:
        path = self.provisioner.notebook_path
        assert path is not None
        return path

    @property
    def sandbox_info(self) -> dict[str, Any]:
        assert self.provisioner.recorder is not None
        return dict(self.provisioner.recorder.metadata["sandbox"])

    @property
    def recorder(self) -> Recorder:
        """The session's journal and notebook writer (an agent loop records its turns through it)."""
        recorder = self.provisioner.recorder
        assert recorder is not None
        return recorder

    @property
    def manifest(self) -> list[dict[str, Any]]:
        """The session's tools: name, description and JSON Schema of the parameters, in order."""
        registry = self.provisioner.registry
        assert registry is not None
        return registry.manifest()

    @property
    def policy(self) -> Policy:
        settings = self.provisioner.settings
        assert settings is not None
        return settings.policy

    async def call_tool(self, tool: str, args: dict[str, Any]) -> DirectResult:
        """Call a tool from the host, as a model's direct tool use: gated and recorded as a ``direct`` cell."""
        service = self.provisioner.service
        assert service is not None
        return await asyncio.wrap_future(service.call_direct(tool, args))

    async def interrupt(self) -> None:
        """Interrupt the running cell (as Ctrl-C in a notebook does); it ends ``interrupted``."""
        service = self.provisioner.service
        assert service is not None
        await asyncio.to_thread(service.interrupt)

    async def execute(self, code: str, timeout: float | None = None) -> CellResult:
        """Run ``code`` as one cell; returns when the host has recorded its end."""
        if self.dead:
            raise KernelDied("the sandboxed kernel was stopped; call restart() to get a fresh one")
        service = self.provisioner.service
        assert service is not None and self._client is not None
        msg_id = self._client.execute(code, allow_stdin=False, user_expressions={NAMES: NAMES_EXPRESSION})
        future = service.result_future(msg_id)
        settings = self.provisioner.settings
        assert settings is not None
        limit = timeout or (settings.sandbox.cell_timeout + settings.sandbox.interrupt_grace + 60)
        try:
            record = await asyncio.wait_for(asyncio.wrap_future(future), limit)
        finally:
            service.forget_result(msg_id)
        await self._drain_replies()
        result = CellResult.from_record(record)
        if result.status in ("killed", "kernel-died", "memory") or "message-size" in result.limits_hit:
            self.dead = True
        # The cgroup backstop, or a message over the host's size bound: restart at once, and say what was lost.
        reason = "memory" if result.status == "memory" else "message-size" if self.dead and \
            "message-size" in result.limits_hit else None
        if reason is not None:
            await self.restart()
            self.recorder.kernel_restarted(reason, self._names)
            self._names = []
        return result

    async def _drain_replies(self) -> None:
        """Read execute replies only for the names they list: the host's record, not the reply, is the result."""
        while True:
            try:
                reply = await self._client.get_shell_msg(timeout=0)
            except queue.Empty:
                return
            names = variable_names(reply.get("content", {}))
            if names is not None:
                self._names = names
