"""Who may reach `cellgate mcp serve --transport http` (extensions/mcp/listen.py): without [mcp.auth] it starts
only with --allow-local-users, and any loopback bind checks Host and Origin. Over HTTP, as another user:
tests/security/test_mcp_doors.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Ran

from cellgate.extensions.mcp.listen import transport_security


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.2", {"127.0.0.2", "127.0.0.2:*"}),
    ("127.8.9.10", {"127.8.9.10", "127.8.9.10:*"}),
    ("::1", {"[::1]", "[::1]:*", "127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*"}),
    ("localhost", {"[::1]", "[::1]:*", "127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*"}),
])
def test_every_loopback_bind_allows_only_its_own_address_as_host_and_origin(host: str, allowed: set[str]) -> None:
    security = transport_security(host)
    assert security is not None and security.enable_dns_rebinding_protection
    assert set(security.allowed_hosts) == allowed
    assert set(security.allowed_origins) == {f"{scheme}://{h}" for scheme in ("http", "https") for h in allowed}


def test_the_resource_host_is_allowed_too_and_beyond_loopback_auth_decides() -> None:
    security = transport_security("127.0.0.2", "https://cellgate.example/mcp")  # a proxy on this host forwards it
    assert security is not None and "cellgate.example:*" in security.allowed_hosts
    assert "https://cellgate.example" in security.allowed_origins
    assert transport_security("0.0.0.0") is None and transport_security("10.0.0.5") is None


def test_http_without_auth_does_not_start_without_allow_local_users(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    (tmp_path / "cellgate.toml").write_text("[sandbox]\nmemory_mb = 512\n")
    ran = cli("mcp", "serve", "--transport", "http", "--host", "127.0.0.2", "--port", "8123", cwd=tmp_path)
    assert ran.returncode == 2
    assert f"--transport http on 127.0.0.2:8123 without [mcp.auth] ({tmp_path / 'cellgate.toml'} has no " \
           "[mcp.auth]) would serve every account of this host" in ran.stderr, ran.stderr
    assert "pass --allow-local-users if you trust every account here" in ran.stderr
    # The flag does not open a bind beyond loopback: that still needs [mcp.auth].
    ran = cli("mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--allow-local-users", cwd=tmp_path)
    assert ran.returncode == 2 and "configure [mcp.auth]" in ran.stderr
