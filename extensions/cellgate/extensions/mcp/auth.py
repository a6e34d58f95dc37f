"""Who calls ``cellgate mcp serve`` over HTTP: ``[mcp.auth]`` as the MCP SDK's token verifier.

The SDK does the HTTP part (``mcp.server.auth``): a request without a valid
token gets 401 with the ``WWW-Authenticate: Bearer`` challenge naming the
protected-resource metadata (RFC 9728, served at
``/.well-known/oauth-protected-resource/mcp``), one without a required scope
403 ``insufficient_scope``. This module only says whether a token is good and
whose it is:

- a JWT access token from the OAuth 2.1 authorization server ``issuer``:
  signed by a key of its JWKS (``jwks_url``, fetched and cached by PyJWT's
  ``PyJWKClient``), ``iss`` the issuer, ``aud`` this server's ``resource``
  URL, not expired; its principal is the claim ``principal_claim`` (``sub``);
- a static token from ``tokens_file`` or ``tokens_env`` (never cellgate.toml),
  one line ``PRINCIPAL TOKEN`` or ``PRINCIPAL sha256:HEX`` each. Only digests
  are kept; a presented token's digest is compared with every one of them in
  constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from cellgate.gate import ConfigError

from .config import McpAuth

STATIC = "static-token"  # the issuer recorded for a principal of a static token
PRINCIPAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")
HEX_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
MIN_TOKEN_CHARS = 24

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Principal:
    """Whom a request acts for: sessions, quotas and the record are theirs."""

    name: str
    issuer: str  # the JWT issuer, or STATIC

    def record(self) -> dict[str, str]:
        return {"name": self.name, "issuer": self.issuer}


def current_principal() -> Principal | None:
    """The principal of the request being handled; None without ``[mcp.auth]`` (stdio, or HTTP on loopback)."""
    token = get_access_token()
    if token is None or token.subject is None:
        return None
    return Principal(token.subject, str((token.claims or {}).get("iss") or STATIC))


def parse_tokens(text: str, where: str) -> dict[str, str]:
    """``PRINCIPAL TOKEN`` / ``PRINCIPAL sha256:HEX`` lines (``#`` comments) -> {sha256 hex digest: principal}."""
    digests: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not PRINCIPAL_NAME.match(parts[0]):
            raise ConfigError(f"{where}, line {number}: expected 'PRINCIPAL TOKEN' or 'PRINCIPAL sha256:HEX' with a "
                              "principal name of letters, digits and _.@:- (the token itself is not shown)")
        name, secret = parts
        hashed = HEX_DIGEST.match(secret)
        if hashed is None and len(secret) < MIN_TOKEN_CHARS:
            raise ConfigError(f"{where}, line {number}: the token of principal {name!r} has {len(secret)} "
                              f"characters; use at least {MIN_TOKEN_CHARS} random ones, e.g. "
                              "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
        digest = hashed.group(1) if hashed else sha256(secret)
        if digests.get(digest, name) != name:
            raise ConfigError(f"{where}, line {number}: this token is already the token of principal "
                              f"{digests[digest]!r}; give each principal its own")
        digests[digest] = name
    return digests


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_tokens(auth: McpAuth, resolve: Any) -> dict[str, str]:
    """The static tokens of ``tokens_file`` and ``tokens_env`` (``resolve`` makes the file's path absolute)."""
    digests: dict[str, str] = {}
    if auth.tokens_file:
        path = Path(resolve(auth.tokens_file))
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"[mcp.auth] tokens_file {str(path)!r} cannot be read ({exc.strerror}); create it "
                              "with one 'PRINCIPAL TOKEN' line per principal, readable only by this server") from None
        digests.update(parse_tokens(text, f"tokens_file {str(path)!r}"))
    if auth.tokens_env:
        value = os.environ.get(auth.tokens_env)
        if value is None:
            raise ConfigError(f"[mcp.auth] tokens_env names ${auth.tokens_env}, which is not set; set it to "
                              "'PRINCIPAL TOKEN' lines, or remove tokens_env")
        for digest, name in parse_tokens(value, f"${auth.tokens_env}").items():
            if digests.get(digest, name) != name:
                raise ConfigError(f"${auth.tokens_env}: a token of {name!r} is the token of {digests[digest]!r} "
                                  "in tokens_file; give each principal its own")
            digests[digest] = name
    if (auth.tokens_file or auth.tokens_env) and not digests:
        raise ConfigError("[mcp.auth] static tokens are configured but none was found; add 'PRINCIPAL TOKEN' lines")
    return digests


class Verifier:
    """The SDK's ``TokenVerifier``: static tokens first, then JWTs; None for a token that is neither valid."""

    def __init__(self, auth: McpAuth, tokens: dict[str, str]) -> None:
        self.auth = auth
        self._tokens = list(tokens.items())
        self._jwks = jwt.PyJWKClient(auth.jwks_url, cache_jwk_set=True, lifespan=300, timeout=10) if auth.jwks_url \
            else None

    async def verify_token(self, token: str) -> AccessToken | None:
        name = self._static(token)
        if name is not None:
            return AccessToken(token=token, client_id=name, subject=name, scopes=list(self.auth.scopes),
                               resource=self.auth.resource, claims={"iss": STATIC})
        if self._jwks is None:
            return None
        try:
            return await self._jwt(token, self._jwks)
        except jwt.PyJWKClientConnectionError as exc:  # every JWT is refused until the issuer answers again
            _log.warning("refused a bearer token: the issuer's JWKS (%s) cannot be fetched: %s", self.auth.jwks_url,
                         exc)
            return None
        except jwt.PyJWTError as exc:  # a bad token is a 401, whatever is wrong with it; the log says what
            _log.info("refused a bearer token: %s", exc)
            return None

    def _static(self, token: str) -> str | None:
        presented = sha256(token)
        found = None
        for digest, name in self._tokens:  # every digest is compared: the time does not depend on which matched
            if hmac.compare_digest(presented, digest):
                found = name
        return found

    async def _jwt(self, token: str, jwks: jwt.PyJWKClient) -> AccessToken | None:
        auth = self.auth
        key = await anyio.to_thread.run_sync(jwks.get_signing_key_from_jwt, token)  # fetches the JWKS when due
        claims = jwt.decode(token, key, algorithms=auth.algorithms, audience=auth.resource, issuer=auth.issuer,
                            leeway=auth.leeway, options={"require": ["exp", "iss", "aud", auth.principal_claim]})
        name = claims[auth.principal_claim]
        if not isinstance(name, str) or not name:
            _log.info("refused a bearer token: its %s claim is not a non-empty string", auth.principal_claim)
            return None
        return AccessToken(token=token, client_id=str(claims.get("client_id") or claims.get("azp") or name),
                           subject=name, scopes=scopes(claims), expires_at=int(claims["exp"]),
                           resource=auth.resource, claims={"iss": claims["iss"]})


def scopes(claims: dict[str, Any]) -> list[str]:
    """RFC 9068's space-separated ``scope``, or the list many issuers put in ``scp``."""
    value = claims.get("scope", claims.get("scp", ""))
    return value.split() if isinstance(value, str) else [str(s) for s in value] if isinstance(value, list) else []


def auth_settings(auth: McpAuth, url: str) -> AuthSettings:
    """The SDK's settings: with JWTs, the protected-resource metadata names the issuer and the challenge points
    at it; with static tokens only there is no authorization server to name (``issuer_url`` is then required by
    the model but unused: no metadata route, no authorization routes)."""
    if auth.jwt():
        return AuthSettings(issuer_url=auth.issuer, resource_server_url=auth.resource,  # type: ignore[arg-type]
                            required_scopes=list(auth.scopes), validate_token_resource=True)
    return AuthSettings(issuer_url=url, resource_server_url=None,  # type: ignore[arg-type]
                        required_scopes=list(auth.scopes), validate_token_resource=False)
