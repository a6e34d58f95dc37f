"""Making untrusted text safe to send back: redaction of host paths, credentials and secrets, and trimming.

Showing it to a person (hidden characters as escapes) is ``_terminal``'s, the one definition of what is
hidden, which every view uses.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

_PATH = re.compile(r"(?<![\w.])/(?:[\w.@+-]+/)+[\w.@+-]*")
# A URL is not a host path: it is kept whole (a password in it is not), except one that names a path on this host:
# a file: URL, or one with no host (sqlite:///home/ann/db).
_URL = (r"(?P<url>\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://"
        r"(?:(?P<userinfo>[^\s/@\"'<>]*:[^\s/@\"'<>]*)@)?[^\s\"'<>]*)")
_PATH_OR_URL = re.compile(f"{_URL}|{_PATH.pattern}")
_CREDENTIAL = re.compile(
    r"(?i)(bearer\s+[\w.~+/=-]{8,}|authorization:\s*\S+(\s+\S+)?|\bsk-[\w-]{8,}|\bAKIA[0-9A-Z]{12,}|"
    r"(api[_-]?key|token|secret|password)=[^\s&]+)"
)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace known secret values with a marker."""
    for secret in sorted({s for s in secrets if isinstance(s, str) and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove host paths, credentials and known secret values from an error message."""
    text = scrub(text, secrets)
    text = _CREDENTIAL.sub("[redacted]", text)
    text = _PATH_OR_URL.sub(_host_path_out, text)
    return unicodedata.normalize("NFC", text)[:2000]


def _host_path_out(match: re.Match[str]) -> str:
    if match.group("url") is None:
        return "<host path>"
    scheme, url = match.group("scheme"), match.group("url")
    if scheme.lower() == "file" or url[len(scheme) + 3:].startswith("/"):
        return f"{scheme}://<host path>"
    if match.group("userinfo") is not None:  # user:password@ in the URL
        start, end = match.span("userinfo")
        url = f"{url[:start - match.start()]}[redacted]{url[end - match.start():]}"
    return url


def trim(text: str, budget: int, where: str) -> str:
    """What a model sees of a long output: the first two thirds and the last third of ``budget``
    characters, with a note of what was dropped and ``where`` the whole output is."""
    if len(text) <= budget:
        return text
    head, tail = budget * 2 // 3, budget // 3
    dropped = len(text) - head - tail
    return (f"{text[:head]}\n[… {dropped:,} characters dropped here to fit the output budget; "
            f"the full output is in {where} …]\n{text[len(text) - tail:]}")
