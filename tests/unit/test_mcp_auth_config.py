"""[mcp.auth] and [mcp.quotas] as parsed, static tokens as loaded and checked, and `cellgate mcp serve` refusing to
listen beyond loopback without auth (issue 20). Over HTTP: tests/sandbox/test_mcp_auth.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Ran

from cellgate.extensions.mcp.auth import STATIC, Verifier, load_tokens, parse_tokens, sha256
from cellgate.extensions.mcp.cli import loopback
from cellgate.extensions.mcp.config import McpConfig
from cellgate.extensions.mcp.events import render_principal
from cellgate.gate import ConfigError, load_settings

ALICE = "a" * 20 + "-alice-token"
BOB = "b" * 20 + "-bob-token"


def config_of(tmp_path: Path, text: str) -> McpConfig:
    path = tmp_path / "cellgate.toml"
    path.write_text(text)
    return load_settings(path).section("mcp", McpConfig)


@pytest.mark.parametrize(("text", "fragment"), [
    ("[mcp.auth]\n", "configure JWT access tokens (issuer, jwks_url, resource) or static tokens"),
    ("[mcp.auth]\nissuer = 'https://login.example'\n", "jwks_url, resource missing"),
    ("[mcp.auth]\ntokens_file = 't'\nissuer = 'login.example'\njwks_url = 'https://l/j'\nresource = 'https://c/mcp'\n",
     "issuer 'login.example' must start with https://"),
    ("[mcp.auth]\ntokens_env = 'T'\nalgorithms = ['HS256']\n", "'none' and HMAC (HS*) are refused"),
    # Tokens never live in cellgate.toml, and the refusal does not repeat them.
    ("[mcp.auth]\ntokens = ['secret-in-the-file']\n", "unknown key 'mcp.auth.tokens'"),
    ("[mcp.quotas]\nsessions = 0\n", "sessions"),
])
def test_bad_auth_and_quota_sections_are_refused_naming_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_of(tmp_path, text)
    assert fragment in str(info.value) and "secret-in-the-file" not in str(info.value)


def test_a_principal_quota_changes_only_the_limits_it_names(tmp_path: Path) -> None:
    quotas = config_of(tmp_path, "[mcp.quotas]\nsessions = 2\ncalls_per_hour = 100\n"
                                 "[mcp.quotas.principals.bob]\ncalls_per_hour = 5\n").quotas
    assert quotas.of("bob").model_dump() == {"sessions": 2, "calls_per_session": None, "calls_per_hour": 5}
    assert quotas.of("alice").model_dump() == {"sessions": 2, "calls_per_session": None, "calls_per_hour": 100}
    assert quotas.of(None) == quotas.of("alice")


def test_static_tokens_are_kept_as_digests_and_checked_against_every_one(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tokens").write_text(f"# who token\nalice {ALICE}\n\nbob sha256:{sha256(BOB)}\n")
    monkeypatch.setenv("CG_TEST_TOKENS", f"carol {'c' * 30}")
    auth = config_of(tmp_path, "[mcp.auth]\ntokens_file = 'tokens'\ntokens_env = 'CG_TEST_TOKENS'\n").auth
    assert auth is not None
    digests = load_tokens(auth, lambda p: tmp_path / p)
    assert digests == {sha256(ALICE): "alice", sha256(BOB): "bob", sha256("c" * 30): "carol"}
    assert ALICE not in repr(digests)
    verifier = Verifier(auth, digests)
    for token, name in ((ALICE, "alice"), (BOB, "bob")):
        access = asyncio.run(verifier.verify_token(token))
        assert access is not None and (access.subject, access.claims, access.scopes) == (
            name, {"iss": STATIC}, ["cellgate:execute"])
    assert asyncio.run(verifier.verify_token(ALICE[:-1])) is None
    assert asyncio.run(verifier.verify_token("")) is None


@pytest.mark.parametrize(("text", "fragment"), [
    ("alice short\n", "line 1: the token of principal 'alice' has 5 characters; use at least 24"),
    (f"alice {ALICE} extra\n", "line 1: expected 'PRINCIPAL TOKEN'"),
    (f"al ice {ALICE}\n", "line 1: expected 'PRINCIPAL TOKEN'"),
    (f"alice {ALICE}\nbob {ALICE}\n", "line 2: this token is already the token of principal 'alice'"),
])
def test_a_bad_token_line_is_refused_without_showing_the_token(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_tokens(text, "tokens_file 't'")
    assert fragment in str(info.value)
    assert ALICE not in str(info.value) and "short" not in str(info.value)


def test_missing_token_sources_are_refused_saying_what_to_do(tmp_path: Path) -> None:
    auth = config_of(tmp_path, "[mcp.auth]\ntokens_file = 'absent'\n").auth
    assert auth is not None
    with pytest.raises(ConfigError, match=r"tokens_file '.*absent' cannot be read"):
        load_tokens(auth, lambda p: tmp_path / p)
    auth = config_of(tmp_path, "[mcp.auth]\ntokens_env = 'CG_TEST_UNSET_TOKENS'\n").auth
    assert auth is not None
    with pytest.raises(ConfigError, match=r"\$CG_TEST_UNSET_TOKENS, which is not set"):
        load_tokens(auth, lambda p: tmp_path / p)


@pytest.mark.parametrize(("host", "expected"), [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.0.2", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("example.com", False), ("", False),
])
def test_loopback(host: str, expected: bool) -> None:
    assert loopback(host) is expected


def test_http_beyond_loopback_without_auth_is_refused_naming_mcp_auth(tmp_path: Path,
                                                                     cli: Callable[..., Ran]) -> None:
    (tmp_path / "cellgate.toml").write_text("[sandbox]\nmemory_mb = 512\n")
    ran = cli("mcp", "serve", "--transport", "http", "--host", "0.0.0.0", cwd=tmp_path)
    assert ran.returncode == 2
    assert "--host 0.0.0.0" in ran.stderr and "has no [mcp.auth]; configure [mcp.auth]" in ran.stderr
    ran = cli("mcp", "serve", "--transport", "http", "--certfile", "c.pem", cwd=tmp_path)
    assert ran.returncode == 2 and "--certfile and --keyfile go together" in ran.stderr


def test_the_owner_of_a_session_is_kept_in_the_notebook_metadata() -> None:
    class Run:
        sections: dict[str, object] = {}

    run = Run()
    assert render_principal(run, {"principal": {"name": "alice", "issuer": STATIC}}) is None  # type: ignore[arg-type]
    assert run.sections["principal"] == {"name": "alice", "issuer": STATIC}
