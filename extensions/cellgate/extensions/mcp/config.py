"""``[mcp]`` of cellgate.toml: the MCP servers whose tools a session gets.

Registered as a config section through the ``cellgate.config_sections`` entry
point; read with ``settings.section("mcp", McpConfig)``. Light on purpose
(pydantic only): every load of cellgate.toml imports it, the MCP SDK is not.
"""

from __future__ import annotations

import keyword
import re

from pydantic import Field, field_validator, model_validator

from cellgate.gate import StrictModel


class McpServer(StrictModel):
    """``[mcp.servers.NAME]``: an MCP server whose tools become ``tools.NAME.*``.

    Connected by the host only: its command, environment and headers (where
    credentials go) never reach the sandbox.
    """

    command: str | None = Field(default=None, description="stdio: the program to start")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="added to a minimal environment")
    cwd: str | None = None
    url: str | None = Field(default=None, description="streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp")
    headers: dict[str, str] = Field(default_factory=dict)
    optional: bool = Field(default=False, description="if it fails to start: a warning and its tools absent")
    start_timeout: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        if self.url is not None and not re.match(r"^https?://", self.url):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        return self

    def transport(self) -> str:
        return "stdio" if self.command else "streamable HTTP"


class McpConfig(StrictModel):
    servers: dict[str, McpServer] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServer]) -> dict[str, McpServer]:
        for name in servers:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_]*$", name) or keyword.iskeyword(name):
                raise ValueError(f"server name {name!r} becomes tools.{name}: use letters, digits and _")
        return servers
