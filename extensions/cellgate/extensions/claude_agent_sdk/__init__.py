"""The Claude Agent SDK on cellgate (``pip install 'cellgate[claude-agent-sdk]'``).

``cellgate_mcp_server(session)`` is an in-process SDK MCP server for ``ClaudeAgentOptions(mcp_servers=...)``: one
tool, ``execute_python``, that runs the model's code as a cell of a running cellgate session and gives the model
what it printed (and its images). Claude Code itself (without the SDK) reaches cellgate through ``.mcp.json`` and
``cellgate mcp serve`` (docs/integrations/claude_agent_sdk.md).
"""

from __future__ import annotations

from .server import TOOL_NAME, cellgate_mcp_server, execute_python_tool

__all__ = ["TOOL_NAME", "cellgate_mcp_server", "execute_python_tool"]
