"""The host's own bounds against a hostile kernel: the configured limits and what the host parses.

``HostBounds`` holds the configured limits (``[sandbox] max_message_mb`` and
``max_refusals_per_cell``); the caps say how much of a message's header,
metadata and content the host parses; ``json_values`` counts what a message
would cost to parse before the host parses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]

# Largest content the host parses of a message that is not an output (status, replies, input requests).
MAX_PARSED_CONTENT = 1 << 20
MAX_HEADER_BYTES = 16 << 10
MAX_METADATA_BYTES = 64 << 10
# JSON values one output may hold: parsed, each costs the host ~50-100 bytes whatever its text
# size ("[]," is 3 bytes of text and a 56-byte list), so a message's cost is bounded by this,
# not only by its size. A plot of tens of thousands of points fits; past it the output is
# counted as dropped, never parsed. Counting them costs at most ~0.5 s of host CPU per message.
MAX_OUTPUT_VALUES = 100_000


def json_values(body: bytes, cap: int = MAX_OUTPUT_VALUES) -> int:
    """How many JSON values ``body`` holds, counted without building them; stops once past ``cap``.

    Commas, brackets and braces outside strings, plus the strings: each string is skipped by
    the json module's C scanner, so the Python work is one step per string, at most ``cap``.
    """
    if body.count(b",") + body.count(b"[") + body.count(b"{") + body.count(b'"') // 2 <= cap:
        return 0  # cannot be over (strings' contents included): no scan
    text = body.decode("utf-8", "replace")
    count = pos = 0
    while count <= cap:
        quote = text.find('"', pos)
        end = len(text) if quote < 0 else quote
        count += text.count(",", pos, end) + text.count("[", pos, end) + text.count("{", pos, end)
        if quote < 0:
            break
        try:
            pos = scanstring(text, quote + 1)[1]
        except ValueError:
            break  # not valid JSON: the parser rejects it
        count += 1
    return count



@dataclass(frozen=True)
class HostBounds:
    max_message_bytes: int = 64 << 20
    max_refusals_per_cell: int = 100
