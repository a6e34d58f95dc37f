"""The host key: a secret that never sits in a run folder.

Someone who can write a run folder (its notebook, journal, blobs) but cannot
read this key cannot make a forged run verify, nor recover a short secret
from its recorded digest. The key lives in the operator's own data folder
(``$CELLGATE_HOST_KEY`` names another file, for tests and for services),
is created once (``cellgate install`` and ``cellgate doctor --fix`` create it;
the first recorded session does too if they never ran) with ``O_EXCL`` and
mode 0600 in a 0700 folder, and is refused if anyone but its owner could
read or replace it.

It proves that whoever recorded (or re-signed) a run held this key. It does
not prove the run happened as recorded on another machine, and anyone who
can read the key can forge runs that verify here.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from cellgate.gate._errors import ConfigError

KEY_BYTES = 32
ENV_VAR = "CELLGATE_HOST_KEY"


def default_path() -> Path:
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "cellgate" / "host.key"


@dataclass(frozen=True)
class HostKey:
    path: Path
    secret: bytes

    @property
    def key_id(self) -> str:
        """A short public name of the key (a digest of a digest: it reveals nothing of the key)."""
        return hashlib.sha256(b"cellgate key id\0" + self.secret).hexdigest()[:16]

    def mac(self, data: bytes, purpose: str) -> str:
        """HMAC-SHA256 of ``data``, domain-separated by ``purpose`` ("journal-head", "secret-digest", ...)."""
        return hmac.new(self.secret, purpose.encode() + b"\0" + data, hashlib.sha256).hexdigest()

    def check(self, data: bytes, purpose: str, mac: str) -> bool:
        return hmac.compare_digest(self.mac(data, purpose), mac)


def _check_private(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid():
        raise ConfigError(f"the host key {what} {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); "
                          f"remove it, or point ${ENV_VAR} at a key of your own")
    if st.st_mode & 0o077:
        raise ConfigError(f"the host key {what} {path} is open to others (mode {stat.S_IMODE(st.st_mode):o}); "
                          f"run `chmod go-rwx {path}`")


def load(path: Path | None = None, create: bool = True) -> HostKey:
    """The host key at ``path`` (default: :func:`default_path`), created if absent and ``create``."""
    path = path or default_path()
    if create:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(KEY_BYTES))
                out.flush()
                os.fsync(out.fileno())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ConfigError(f"no host key at {path}; `cellgate install` creates one") from None
    except OSError as exc:
        raise ConfigError(f"cannot open the host key {path}: {exc.strerror}; it must be a regular file") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"the host key {path} is not a regular file; remove it and run `cellgate install`")
        _check_private(path, st, "file")
        _check_private(path.parent, os.stat(path.parent), "folder")
        secret = handle.read(KEY_BYTES + 1)
    if len(secret) != KEY_BYTES:
        raise ConfigError(f"the host key {path} has {len(secret)} bytes, not {KEY_BYTES}; "
                          "remove it and run `cellgate install` (runs signed with it will no longer verify)")
    return HostKey(path, secret)


__all__ = ["ENV_VAR", "HostKey", "default_path", "load"]
