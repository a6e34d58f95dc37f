"""MCP both ways: tools from MCP servers (``[mcp.servers.NAME]``), and cellgate as an MCP server
(``cellgate mcp serve``), on the official ``mcp`` SDK."""
