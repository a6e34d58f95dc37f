"""``CellgateKernel``: the ipykernel that runs inside the sandbox.

Two additions to ``IPythonKernel``:

- gate replies arrive as ``comm_msg`` on the **control** channel (the shell
  channel is blocked while a cell runs) and go straight to the tools runtime;
- the generated ``tools`` package is imported into the user namespace.
"""

from __future__ import annotations

import importlib
import os
import resource
import threading
from typing import Any

from ipykernel.ipkernel import IPythonKernel

from . import runtime


THREAD_STACK_BYTES = 2 << 20


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def apply_memory_limit() -> None:
    """Cap the address space slightly under the sandbox memory limit.

    An over-allocation then fails as ``MemoryError`` inside the cell and the
    kernel survives, instead of the whole sandbox being OOM-killed.
    """
    limit = os.environ.get("CELLGATE_RLIMIT_AS")
    if limit and limit.isdigit():
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
        # Thread stacks reserve address space up front (8 MiB each by default):
        # keep them small so many threads fit under the cap.
        threading.stack_size(THREAD_STACK_BYTES)


class CellgateKernel(IPythonKernel):
    implementation = "cellgate"
    implementation_version = "0.1.0"
    banner = "cellgate: an IPython kernel in a gVisor sandbox; tools calls are gated and recorded"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate_client = runtime.GateClient(reply_wait=_env_float("CELLGATE_REPLY_WAIT", 3600.0))
        runtime.install(self.gate_client)
        self.control_handlers["comm_msg"] = self._gate_reply
        self._preload_tools()

    def _preload_tools(self) -> None:
        if self.shell is None:
            return
        try:
            tools = importlib.import_module("tools")
        except ImportError:
            return  # a session without tools
        self.shell.user_ns["tools"] = tools
        # Keep `tools` out of %who and `del`-by-reset surprises like other preloads.
        self.shell.user_ns_hidden["tools"] = tools

    def _gate_reply(self, stream: Any, ident: Any, msg: dict[str, Any]) -> None:
        content = msg.get("content") or {}
        if content.get("comm_id") == self.gate_client.comm_id:
            self.gate_client.resolve(content.get("data"))
