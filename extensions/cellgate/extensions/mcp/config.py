"""``[mcp]`` of cellgate.toml: the MCP servers whose tools a session gets, and ``cellgate mcp serve``'s settings.

Registered as a config section through the ``cellgate.config_sections`` entry
point; read with ``settings.section("mcp", McpConfig)``. Light on purpose
(pydantic only): every load of cellgate.toml imports it, the MCP SDK is not.
"""

from __future__ import annotations

import keyword
import re

from pydantic import Field, field_validator, model_validator

from cellgate.gate.ext import StrictModel


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


class McpAuth(StrictModel):
    """``[mcp.auth]``: who may use ``cellgate mcp serve --transport http`` (see ``auth``).

    JWT access tokens from an OAuth 2.1 authorization server (``issuer``, ``jwks_url``), static bearer tokens
    (``tokens_file`` or ``tokens_env``: never in this file), or both.
    """

    resource: str | None = Field(default=None, description="this server's URL, e.g. https://cellgate.example/mcp: "
                                                            "the audience a JWT must carry")
    issuer: str | None = Field(default=None, description="the authorization server: a JWT's iss must equal it")
    jwks_url: str | None = Field(default=None, description="where the issuer publishes its signing keys")
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"])
    principal_claim: str = Field(default="sub", description="the JWT claim that names the principal")
    scopes: list[str] = Field(default_factory=lambda: ["cellgate:execute"], description="every token must have these")
    leeway: float = Field(default=30.0, ge=0, le=300, description="seconds of clock skew allowed on exp and nbf")
    tokens_file: str | None = Field(default=None, description="static tokens: lines 'PRINCIPAL TOKEN' or "
                                                              "'PRINCIPAL sha256:HEX'")
    tokens_env: str | None = Field(default=None, description="static tokens: an environment variable, same lines")

    @model_validator(mode="after")
    def _complete(self) -> McpAuth:
        jwt = {"issuer": self.issuer, "jwks_url": self.jwks_url, "resource": self.resource}
        if self.issuer or self.jwks_url:
            missing = [key for key, value in jwt.items() if not value]
            if missing:
                raise ValueError(f"JWT access tokens need issuer, jwks_url and resource; {', '.join(missing)} "
                                 "missing")
        elif not (self.tokens_file or self.tokens_env):
            raise ValueError("configure JWT access tokens (issuer, jwks_url, resource) or static tokens "
                             "(tokens_file or tokens_env), or remove [mcp.auth]")
        for key in ("resource", "issuer", "jwks_url"):
            value = getattr(self, key)
            if value is not None and not re.match(r"^https?://", value):
                raise ValueError(f"{key} {value!r} must start with https:// (or http:// on a trusted network)")
        if not self.algorithms or any(a.lower() == "none" or a.startswith("HS") for a in self.algorithms):
            raise ValueError(f"algorithms {self.algorithms!r}: give asymmetric ones (RS256, ES256, EdDSA, ...); "
                             "'none' and HMAC (HS*) are refused")
        return self

    def jwt(self) -> bool:
        return self.issuer is not None


class Quota(StrictModel):
    """Limits of one principal; absent means no limit (``--max-sessions`` still caps the server)."""

    sessions: int | None = Field(default=None, ge=1, description="sessions open at once")
    calls_per_session: int | None = Field(default=None, ge=1, description="execute_python calls in one session")
    calls_per_hour: int | None = Field(default=None, ge=1, description="execute_python calls in any 60 minutes")


class McpQuotas(Quota):
    """``[mcp.quotas]``: each principal's limits; ``[mcp.quotas.principals.NAME]`` changes some for one."""

    principals: dict[str, Quota] = Field(default_factory=dict)

    def of(self, principal: str | None) -> Quota:
        own = self.principals.get(principal) if principal is not None else None
        keys = Quota.model_fields
        return Quota(**{k: getattr(own if own and k in own.model_fields_set else self, k) for k in keys})


class McpConfig(StrictModel):
    servers: dict[str, McpServer] = Field(default_factory=dict)
    auth: McpAuth | None = None
    quotas: McpQuotas = Field(default_factory=McpQuotas)
    idle_pause: float = Field(default=0.0, ge=0, description="cellgate mcp serve: seconds after which an unused "
                              "session is paused into a checkpoint and its sandbox freed (0: never); its next call "
                              "resumes it, variables and all")
    pause_on_stop: bool = Field(default=True, description="cellgate mcp serve: when the server stops, pause its "
                                "sessions into checkpoints (a restarted server resumes them) instead of ending them")
    state_dir: str | None = Field(default=None, description="cellgate mcp serve: the folder of its paused sessions "
                                  "(this user's alone); default: mcp-serve in [audit] dir")

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServer]) -> dict[str, McpServer]:
        for name in servers:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_]*$", name) or keyword.iskeyword(name):
                raise ValueError(f"server name {name!r} becomes tools.{name}: use letters, digits and _")
        return servers
