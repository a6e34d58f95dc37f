"""Recorded text shown to a person: nothing in it acts on the terminal or hides. The one text-safety module.

Everything a run recorded came from, or through, the sandbox, and so did
the arguments an approver looks at. Every view of it uses this module: the
terminal (``cellgate show``, ``exec``, the approval prompt), the HTML of the
notebook's calls table and of ``cellgate report`` (``html_text``), and the
JupyterLab extension's server side (through ``cellgate.gate``), so a hidden
character is shown the same way everywhere. Two views:

- ``clean(text)``: text as text (program output, tracebacks, notebook
  fields). Colour and style sequences (SGR) are dropped; every other escape
  sequence (CSI cursor moves and screen clears, OSC including OSC 52
  clipboard writes and OSC 8 links, DCS, APC, PM, SOS), every C1 control
  and every C0 control but newline and tab is shown as a visible escape
  such as ``\\x1b]52;c;…\\x07``, so no such byte reaches the terminal.
- ``reveal(text)``: one field a decision rests on (a tool name, arguments,
  a program line). On top of that, every code point a person cannot see or
  tell from a space is shown escaped (``\\u2003``): controls, format and
  bidi characters (Cf, including tag characters), every space but U+0020,
  line and paragraph separators, private-use, unassigned and surrogate code
  points, and the blank-looking letters U+2800, U+3164, U+115F, U+1160,
  U+FFA0, variation selectors and the combining grapheme joiner. With
  ``compress``, a run of one such character is shown once with its count,
  and a long run of spaces as ``⟨N blanks⟩``.

Neither output is ever parsed as rich markup: callers print it as
``rich.text.Text`` (or plain ``print``), so ``[bold]`` stays ``[bold]``.
A long field is shown head and tail (``head_and_tail``, ``value_text``);
``html_text`` is that, HTML-escaped.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from typing import Any

_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI
    r"|(?:\x1b[\]P_^X]|[\x9d\x90\x9f\x9e\x98])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, APC, PM, SOS
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]",  # every other escape sequence
)
_SGR = re.compile(r"(?:\x1b\[|\x9b)[0-9;:]*m")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(char, f"\\x{code:02x}")
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clean(text: str) -> str:
    """``text`` safe to write to a terminal: styles dropped, other control sequences shown escaped."""
    text = text.replace("\r\n", "\n")

    def sequence(match: re.Match[str]) -> str:
        found = match.group(0)
        return "" if _SGR.fullmatch(found) else _CONTROL.sub(lambda m: _escape(m.group(0)), found)

    text = _SEQUENCE.sub(sequence, text)
    return _CONTROL.sub(lambda m: _escape(m.group(0)), text)


_BLANK_LETTERS = frozenset("\u2800\u3164\u115f\u1160\uffa0\u034f\u180b\u180c\u180d\u180f")
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Co", "Cn", "Cs"})


def hidden(char: str) -> bool:
    """Whether a person could not see ``char``, or could take it for a plain space."""
    if char == " ":
        return False
    code = ord(char)
    return (unicodedata.category(char) in _HIDDEN_CATEGORIES or char in _BLANK_LETTERS
            or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF)


_CANDIDATE = re.compile(r"([^\x21-\x7e])\1*")  # a run of one character that is not printable ASCII
RUN = 4  # a run this long of one hidden character is shown once, with its count
BLANKS = 16  # a run this long of spaces is shown as its count


def pieces(text: str, compress: bool = True) -> list[tuple[str, bool]]:
    """``reveal``'s output as (text, atomic) pieces; an atomic piece (an escape) must not be cut."""
    if text.isascii() and text.isprintable() and not (compress and " " * BLANKS in text):
        return [(text, False)] if text else []  # printable ASCII, no long run of blanks: nothing to show otherwise
    out: list[tuple[str, bool]] = []
    last = 0
    for match in _CANDIDATE.finditer(text):
        run, char = match.group(0), match.group(1)
        if char == " ":
            if not (compress and len(run) >= BLANKS):
                continue
            shown = f" ⟨{len(run)} blanks⟩ "
        elif not hidden(char):
            continue
        elif compress and len(run) >= RUN:
            shown = f"⟨{len(run)} × {_escape(char)}⟩"
        else:
            shown = _escape(char) * len(run)
        if match.start() > last:
            out.append((text[last:match.start()], False))
        out.append((shown, True))
        last = match.end()
    if last < len(text):
        out.append((text[last:], False))
    return out


def reveal(text: str, compress: bool = True) -> str:
    """One field, every hidden code point shown as an escape (see the module's description)."""
    return "".join(piece for piece, _ in pieces(text, compress))


def head_and_tail(text: str, limit: int, note: str = "") -> str:
    """``reveal(text)``, whole when ``text`` has at most ``limit`` characters or its escaped form does; else
    the first two thirds and last third of ``limit`` shown characters around a marker ``⟨N characters elided;
    {note}⟩`` (``⟨N characters elided⟩`` with no note), N counted as shown. An escape is never cut in two."""
    if len(text) <= limit:  # a short field is shown whole, however long its escapes make it
        return reveal(text)
    parts = pieces(text)
    total = sum(len(p) for p, _ in parts)
    if total <= limit:
        return "".join(p for p, _ in parts)
    head_budget, tail_budget = limit * 2 // 3, limit // 3
    head: list[str] = []
    used = 0
    for piece, atomic in parts:
        if used + len(piece) > head_budget:
            if not atomic:
                head.append(piece[:head_budget - used])
                used = head_budget
            break
        head.append(piece)
        used += len(piece)
    tail: list[str] = []
    kept = 0
    for piece, atomic in reversed(parts):
        if kept + len(piece) > tail_budget:
            if not atomic:
                tail.append(piece[len(piece) - (tail_budget - kept):])
                kept = tail_budget
            break
        tail.append(piece)
        kept += len(piece)
    elided = total - used - kept
    marker = f"{elided:,} characters elided" + (f"; {note}" if note else "")
    return f"{''.join(head)} … ⟨{marker}⟩ … {''.join(reversed(tail))}"


def value_text(value: Any, limit: int) -> str:
    """A recorded value (a string as it is, anything else as JSON) shown head and tail (``head_and_tail``)."""
    if isinstance(value, str):
        return head_and_tail(value, limit)
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):  # not JSON: a record made in Python, not read from a file
        text = "?"
    return head_and_tail(text, limit)


def html_text(value: Any, limit: int = 4000) -> str:
    """A recorded value as HTML text (``value_text``, then HTML-escaped); '' for None."""
    return "" if value is None else html.escape(value_text(value, limit), quote=True)


__all__ = ["clean", "head_and_tail", "hidden", "html_text", "pieces", "reveal", "value_text"]
