"""An MCP server (stdio) whose tools advertise an outputSchema; `lookup` returns structured content that breaks
it, `lookup_ok` content that fits. The server itself does not validate (the schema is published by hand), so
only the host's check stands between the invalid result and the cell. Every string of the invalid result
carries MARKER, so a test can tell whether any of it got through."""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent

MARKER = "INVALID-RESULT-7c41"
SCHEMA = {"type": "object", "properties": {"customer_id": {"type": "string"}, "tier": {"type": "string"}},
          "required": ["customer_id", "tier"], "additionalProperties": False}
INVALID = {"customer_id": 42, "tier": MARKER, "note": MARKER}
VALID = {"customer_id": "cus-0042", "tier": "gold"}

server = MCPServer("bad")


def _result(data: dict[str, object]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(data))], structured_content=data)


@server.tool()
def lookup(email: str) -> CallToolResult:
    """Find a customer (returns content that does not match the outputSchema)."""
    return _result(INVALID)


@server.tool()
def lookup_ok(email: str) -> CallToolResult:
    """Find a customer (returns content that matches the outputSchema)."""
    return _result(VALID)


for _name in ("lookup", "lookup_ok"):
    tool = server._tool_manager.get_tool(_name)
    assert tool is not None
    tool.fn_metadata.output_schema = SCHEMA

if __name__ == "__main__":
    server.run()
