"""The OpenAI Agents SDK's sandbox on cellgate (``pip install 'cellgate[openai-agents]'``).

``CellgateSandboxClient`` is a sandbox client for ``RunConfig(sandbox=SandboxRunConfig(client=...))``: each
sandbox session is a cellgate session (gVisor), its exec a recorded ``run_command``, its read and write
``download`` / ``upload`` (recorded by sha256), its workspace persisted and hydrated as a tar of ``/workspace``.
The client's ``tools`` are host functions; ``client.capability()`` gives the agent them as function tools whose
every call goes through the session's gate (policy, audit notebook) before it runs on the host.
"""

from __future__ import annotations

from .client import (
    CellgateSandboxClient,
    CellgateSandboxClientOptions,
    CellgateSandboxSession,
    CellgateSandboxSessionState,
    CellgateTools,
)

__all__ = ["CellgateSandboxClient", "CellgateSandboxClientOptions", "CellgateSandboxSession",
           "CellgateSandboxSessionState", "CellgateTools"]
