"""Secrets kept out of the record: a session's secret values, scrubbed from everything it writes.

A value is secret when a tool marks it (``Secret`` in a result) or the policy
names the argument that carries it (``[policy.tools.X] secrets = [...]``).
The sandbox gets the value; the audit trail never does. Once the gate has
seen a secret value, every later text the session records (outputs, errors
and tracebacks, late outputs, programs, other calls' arguments and results,
journal events) has each occurrence replaced by a marker naming where the
value came from, e.g. ``[secret: issue_token result]``, before it is
journalled. The value itself is recorded only as a keyed digest (HMAC-SHA256
with the host key, which never sits in a run folder), so a short secret
cannot be recovered from the record by trying candidates.

This catches a secret printed, raised or passed on as it is. A program that
transforms it (reversed, encoded, one character per line) can still write it
into its own output: the sandbox holds the value, and it is hostile.
Values shorter than ``MIN_CHARS`` characters are not scrubbed (they would
turn up everywhere by chance).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import ahocorasick_rs

from cellgate.gate import _hostkey as hostkey
from cellgate.gate._errors import ConfigError

MIN_CHARS = 4
PURPOSE = "secret-digest"


def _forms(value: str) -> set[str]:
    """The value as it appears raw, inside a Python repr, and inside JSON (both ASCII modes)."""
    forms = {value, repr(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], json.dumps(value)[1:-1]}
    return {form for form in forms if len(form) >= MIN_CHARS}


class SecretScrubber:
    """The secret values one session has seen, and the markers that replace them in its record."""

    def __init__(self, key_loader: Callable[[], hostkey.HostKey] = hostkey.load) -> None:
        self._key_loader = key_loader
        self._key: hostkey.HostKey | None = None
        self._key_problem: str | None = None
        self._markers: dict[str, str] = {}  # every form of every secret -> its marker
        # Automatons over the forms, largest first, merged like a binary counter: a tool that returns a
        # new secret on each of thousands of calls costs O(log n) scans per text and an amortised
        # O(log n) rebuilds per secret, never a rebuild of everything per call.
        self._levels: tuple[tuple[list[str], ahocorasick_rs.AhoCorasick], ...] = ()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._levels)

    def add(self, value: Any, name: str) -> None:
        """Remember ``value`` (a string, or the strings inside a JSON value) as secret, named ``name``."""
        texts = _strings(value)
        if not isinstance(value, (str, bool)) and value is not None:  # a number or a structure, as JSON writes it
            texts.append(json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
        marker = f"[secret: {name}]"
        with self._lock:
            new = []
            for text in texts:
                for form in _forms(text):
                    if form not in self._markers:
                        self._markers[form] = marker
                        new.append(form)
            self._grow(new)

    def known(self) -> dict[str, str]:
        """Every form of every secret seen, with its marker: what a paused or forked session's gate must know
        again (kept with its checkpoint, ``session.live``)."""
        with self._lock:
            return dict(self._markers)

    def restore(self, markers: dict[str, str]) -> None:
        """Know again the secrets another gate of this session knew (``known``)."""
        with self._lock:
            new = [form for form in markers if form not in self._markers]
            self._markers.update((form, markers[form]) for form in new)
            self._grow(new)

    def _grow(self, new: list[str]) -> None:
        """Add the automaton of ``new`` forms (under the lock)."""
        if not new:
            return
        levels = [*self._levels, _compile(new)]
        while len(levels) >= 2 and len(levels[-1][0]) >= len(levels[-2][0]):
            top, below = levels.pop(), levels.pop()
            levels.append(_compile(below[0] + top[0]))
        self._levels = tuple(levels)  # swapped whole: readers on other threads see the old or the new

    def scrub_text(self, text: str) -> str:
        """``text`` with every occurrence of a known secret replaced by its marker (one scan per level)."""
        levels = self._levels
        if not levels:
            return text
        found = [(start, start - end, forms[index])
                 for forms, automaton in levels for index, start, end in automaton.find_matches_as_indexes(text)]
        if not found:
            return text
        if len(levels) > 1:
            found.sort()  # leftmost first, and the longest of those starting at one place
        markers = self._markers
        parts, position = [], 0
        for start, negative_length, form in found:
            if start < position:
                continue
            parts += [text[position:start], markers[form]]
            position = start - negative_length
        parts.append(text[position:])
        return "".join(parts)

    def scrub(self, value: Any) -> Any:
        """``value`` (JSON-like: dicts, lists, strings) with every known secret replaced by its marker."""
        if not self._levels:
            return value
        return self._walk(value)

    def scrub_record(self, data: dict[str, Any]) -> dict[str, Any]:
        """A journal record's fields scrubbed, but for the identifiers that tie records together (a cell's
        ``msg_id``, a call's ``id`` and idempotency key): a short secret that happens to occur inside a
        random id must not unhook a cell from its outputs."""
        if not self._levels:
            return data
        scrubbed = {k: (v if k == "msg_id" else self._walk(v)) for k, v in data.items()}
        call = data.get("call")
        if isinstance(call, dict) and isinstance(scrubbed.get("call"), dict):
            for key in ("id", "idempotency_key"):
                if key in call:
                    scrubbed["call"][key] = call[key]
        return scrubbed

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, dict):
            return {self._walk(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._walk(v) for v in value]
        return value

    def digest(self, value: Any, name: str) -> dict[str, Any]:
        """What the record keeps of a secret value: its name and a keyed digest (never a plain hash)."""
        self.add(value, name)
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"),
                                                               ensure_ascii=False)
        entry: dict[str, Any] = {"redacted": True, "secret": name}
        key = self._host_key()
        if key is None:  # the reason (it names the key's path) stays on the host's screen, not in the record
            entry["digest"] = "none: no usable host key; `cellgate install` creates one"
        else:
            entry["hmac_sha256"] = key.mac(str(text).encode("utf-8", "surrogatepass"), PURPOSE)
            entry["key_id"] = key.key_id
        return entry

    def _host_key(self) -> hostkey.HostKey | None:
        if self._key is None and self._key_problem is None:
            try:
                self._key = self._key_loader()
            except (ConfigError, OSError) as exc:  # no digest rather than a guessable one
                self._key_problem = str(exc)[:300]
        return self._key


def _compile(forms: list[str]) -> tuple[list[str], ahocorasick_rs.AhoCorasick]:
    """One Aho-Corasick automaton over ``forms``: a scan costs the text's length, whatever their number."""
    return forms, ahocorasick_rs.AhoCorasick(forms, matchkind=ahocorasick_rs.MatchKind.LeftmostLongest,
                                             implementation=ahocorasick_rs.Implementation.ContiguousNFA)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [str(value)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


__all__ = ["MIN_CHARS", "SecretScrubber"]
