"""Kernel output made inert before any frontend or rendering sees it.

A cellgate kernel's outputs are hostile: JupyterLab treats outputs produced
live in a session as trusted, so a ``Javascript`` display, a ``<script>`` or
an ``onerror`` in HTML would run in a page that holds the Jupyter server's
XSRF cookie. Every MIME bundle (``display_data``, ``update_display_data``,
``execute_result``, a pager payload, an inspect reply) goes through
``sanitize_bundle`` first:

- ``text/plain``, ``application/json`` and base64 ``image/png|jpeg|gif|webp``
  pass as data;
- ``text/html`` passes nh3 (ammonia) with its allowlist of tags and
  attributes: no script, style, iframe, object, embed, form, base, meta,
  link, svg or math element, no event-handler or style attribute; links only
  http, https, mailto or relative; an ``img`` only from a ``data:image/...``
  URL (a remote image would be a way out of the network-less sandbox);
- ``text/markdown`` is rendered to HTML here (markdown-it, CommonMark) and
  that HTML sanitized like ``text/html``: the frontend then renders exactly
  what was checked, with no markdown parser of its own in between;
- ``image/svg+xml`` is shown as ``<img src="data:image/svg+xml;base64,...">``
  in ``text/html``: an SVG loaded as an image never runs script and never
  loads anything, whatever it contains, so no SVG allowlist is needed;
- TeX commands that make links, styles, classes, images or load packages in
  MathJax (``\\href``, ``\\style``, ``\\require``, ``\\mmlToken``...), and those
  that define new commands (one could spell an active one from pieces), are
  neutralised in ``text/latex`` and in the text of HTML (which JupyterLab also
  typesets). They are looked for in the text MathJax reads: JupyterLab's and
  Notebook 7's MathJax (3.2, ``@jupyterlab/mathjax-extension``) reads math
  across the tags of its ``includeHtmlTags`` (``<br>`` as a newline, ``<wbr>``
  and comments as nothing), so ``\\mml<wbr>Token`` is ``\\mmlToken`` to it: the
  HTML cleaner drops ``<wbr>`` and comments (``<br>`` cannot join a command), and
  ``text/latex`` loses both before the check;
- every other type (``application/javascript``, widget views, vendor types) is
  removed, and a visible note is added to ``text/plain``.

What changed is listed in the output's metadata under ``cellgate.sanitized``.
An operator may name MIME types they trust (``[frontend] trusted_mime``):
those pass exactly as the kernel sent them, except cellgate's own.

cellgate's own MIME types (``application/vnd.cellgate.*``) and metadata key
(``cellgate``) are the host's: from the kernel they are forgeries. They never
pass, trusted or not; each is noted with the action ``forged: ...``, and the
output keeps only its ``text/plain``, which says so: no viewer shows it as
the gate's.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable, Iterable
from html.parser import HTMLParser
from typing import Any

import nh3
from markdown_it import MarkdownIt

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
DATA_TYPES = ("text/plain", "application/json")
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]*$")
_DATA_IMAGE = re.compile(r"^\s*data:image/(png|jpeg|gif|webp|svg\+xml)[;,]", re.IGNORECASE)
# MathJax (TeX input, html/action/unicode/require packages) turns these into links, styles, classes,
# tooltips or package loads; JupyterLab typesets math in HTML, markdown and LaTeX outputs.
_TEX_ACTIVE = re.compile(
    r"\\(href|url|class|cssId|style|data|require|unicode|toggle|mathtip|texttip|tip|html[A-Za-z]*|bbox|enclose"
    r"|mmlToken|setOptions"
    # Definitions: MathJax substitutes a macro's arguments as text, so new commands could assemble an active name.
    r"|[gex]?def|let|(?:re)?newcommand|providecommand|(?:re)?newenvironment|DeclareMathOperator|Newextarrow"
    r"|DeclarePairedDelimiter[A-Za-z]*|newtagform|mathtoolsset)(?![A-Za-z])")
# What MathJax's includeHtmlTags reads as nothing inside math (JupyterLab 4 and Notebook 7: {br: "\n", wbr: "",
# "#comment": ""}); for text/latex, which a frontend may parse as HTML. An unclosed comment runs to the end.
_MATHJAX_IGNORED = re.compile(r"<wbr\b[^>]*>|<!--.*?(?:--!?>|\Z)", re.IGNORECASE | re.DOTALL)
CELLGATE_MIME_PREFIX = "application/vnd.cellgate."
FORGED = "forged"  # the action of a note on what the kernel sent in cellgate's own name
MAX_MARKDOWN = 1 << 20  # rendered on the host's relay thread: a larger one is shown as text
_URL_ATTRIBUTES = frozenset({"href", "src", "cite", "longdesc", "action", "formaction", "background", "poster"})
# Removed with everything inside them (the others are unwrapped to their text).
_CLEAN_CONTENT = {"script", "style", "template", "iframe", "object", "embed", "noscript", "svg", "math", "xmp",
                  "noembed", "noframes", "textarea", "select", "title"}


def _attribute_filter(element: str, attribute: str, value: str) -> str | None:
    if attribute not in _URL_ATTRIBUTES:
        return value
    if element == "img" and attribute == "src":
        return value if _DATA_IMAGE.match(value) else None  # no request leaves the page
    if value.strip().lower().startswith("data:"):
        return None
    return value


def _cleaner(attribute_filter: Callable[[str, str, str], str | None]) -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=_TAGS,
        clean_content_tags=_CLEAN_CONTENT,
        attribute_filter=attribute_filter,
        url_schemes={"http", "https", "mailto", "data"},  # data: only survives the filter in img src
        strip_comments=True,  # MathJax reads math across comments and <wbr> (above): neither is kept
        link_rel="noopener noreferrer nofollow",
    )


_TAGS = set(nh3.ALLOWED_TAGS) - {"wbr"}
_CLEANER = _cleaner(_attribute_filter)
_MARKDOWN = MarkdownIt("commonmark", {"html": True})


def defuse_tex(text: str) -> str:
    r"""``\href{...}`` becomes ``\text{(href removed)}``: inert in MathJax and visible as text.

    ``text`` must be what MathJax reads: cleaned HTML, or TeX passed through ``mathjax_text``.
    """
    return _defuse(text)[0]


def _defuse(text: str) -> tuple[str, list[str]]:
    found: list[str] = []

    def mark(match: re.Match[str]) -> str:
        found.append("\\" + match.group(1))
        return r"\text{(" + match.group(1) + " removed)}"

    return _TEX_ACTIVE.sub(mark, text), found


def mathjax_text(tex: str) -> str:
    """``tex`` without what MathJax would read as nothing in it, removed until none is left (a removal can join
    ``<wb`` and ``r>``)."""
    while True:
        shorter = _MATHJAX_IGNORED.sub("", tex)
        if shorter == tex:
            return tex
        tex = shorter


def clean_html(html: str) -> str:
    return defuse_tex(_CLEANER.clean(html))


def untrusted_markdown(text: str) -> tuple[str, list[str]]:
    """(the source of a markdown cell showing ``text``, what was removed from it) for text nobody checked: a
    model's turn, a task. It is the sanitized HTML of ``text`` (as a ``text/markdown`` output is), with a visible
    note of what was removed, written so that a frontend's markdown renderer shows exactly that HTML."""
    removed: list[str] = []

    def noting(element: str, attribute: str, value: str) -> str | None:
        kept = _attribute_filter(element, attribute, value)
        if kept is None:
            removed.append(f"the {attribute} of an {element}" if element[0] in "aeiou" else
                           f"the {attribute} of a {element}")
        return kept

    if len(text) > MAX_MARKDOWN:
        body = f"<pre>{html.escape(text)}</pre>"
    else:
        rendered = _MARKDOWN.render(text)
        body, tex = _defuse(_cleaner(noting).clean(rendered).rstrip("\n"))
        gone = _tag_names(rendered) - _tag_names(body)
        removed += [f"a <{name}> element" for name in sorted(gone)] + [f"the TeX command {c[1:]}" for c in tex]
    removed = list(dict.fromkeys(removed))
    if removed:
        body += ("<p><em>[cellgate removed from this text: " + html.escape(", ".join(removed))
                 + "; the journal keeps it as written]</em></p>")
    return f'<div class="cellgate-untrusted">{body}</div>'.translate(_MARKDOWN_INERT), removed


# A markdown cell's source is parsed again by the frontend, and JupyterLab finds math in it first, blind to HTML
# (math text it puts back could land in an attribute): one line of HTML (one HTML block to any CommonMark parser)
# in which the characters that math search reads are character references, which mean the same in HTML.
_MARKDOWN_INERT = {ord(c): f"&#{ord(c)};" for c in "$\\{}@`\n\r"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.names: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.add(tag)


def _tag_names(markup: str) -> set[str]:
    """The elements named in ``markup`` (for the note of what was removed; the cleaner decides what stays)."""
    parser = _Tags()
    parser.feed(markup)
    parser.close()
    return parser.names


def svg_as_image(svg: str) -> str:
    encoded = base64.b64encode(svg.encode("utf-8", "replace")).decode()
    return f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG image (shown as an image by cellgate)">'


def _text(value: Any) -> str | None:
    """A MIME value as text: nbformat splits long text into a list of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return None


def sanitize_bundle(data: Any, metadata: Any = None, trusted: Iterable[str] = ()
                    ) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    """(data, metadata, what changed) for one MIME bundle; nothing script-capable is left in data."""
    trusted = frozenset(trusted)
    data = data if isinstance(data, dict) else {}
    metadata = metadata if isinstance(metadata, dict) else {}
    out: dict[str, Any] = {}
    notes: list[dict[str, str]] = []

    def note(mime: str, action: str) -> None:
        notes.append({"mime": mime[:200], "action": action})

    html_parts: list[str] = []
    forged = [str(k) for k in metadata if _cellgates(str(k))] + [str(m) for m in data if _cellgates(str(m))]
    for claimed in forged:
        note(claimed if claimed != "cellgate" else "metadata.cellgate",
             f"{FORGED}: cellgate's own name from the kernel; removed (only the host writes it)")
    for mime, value in sorted(data.items(), key=lambda item: str(item[0])):  # the journal stores keys sorted
        mime = str(mime)
        if _cellgates(mime):
            continue
        if mime in trusted:
            out[mime] = value
            continue
        text = _text(value)
        if mime in DATA_TYPES:
            if mime == "text/plain" and text is None:
                note(mime, "removed (not text)")
                continue
            out[mime] = text if mime == "text/plain" else value
        elif mime in IMAGE_TYPES:
            if text is not None and _BASE64.match(text):
                out[mime] = text
            else:
                note(mime, "removed (not base64 image data)")
        elif mime == "text/html" and text is not None:
            cleaned = clean_html(text)
            out[mime] = cleaned
            if cleaned != text:
                note(mime, "cleaned")
        elif mime == "text/markdown" and text is not None and len(text) > MAX_MARKDOWN:
            out.setdefault("text/plain", text)
            note(mime, f"shown as text/plain (over {MAX_MARKDOWN} characters)")
        elif mime == "text/markdown" and text is not None:
            html_parts.append(clean_html(_MARKDOWN.render(text)))
            note(mime, "rendered to sanitized text/html")
        elif mime == "image/svg+xml" and text is not None:
            html_parts.append(svg_as_image(text))
            note(mime, "shown as an image in text/html")
        elif mime == "text/latex" and text is not None:
            defused = defuse_tex(mathjax_text(text))
            out[mime] = defused
            if defused != text:
                note(mime, "cleaned")
        else:
            note(mime, "removed")
    if html_parts and "text/html" not in out:
        out["text/html"] = "\n".join(html_parts)
    removed = [n["mime"] for n in notes if n["action"].startswith("removed")]
    added = []
    if removed or not (out or forged):
        added.append(f"[cellgate removed output of type {', '.join(removed) or 'none'}: "
                     "kernel output may not run script in a frontend; the journal keeps it as data]")
    if forged:  # shown as text only, so the note below is what every viewer shows of it
        for mime in sorted(set(out) - {"text/plain"}):
            note(mime, "dropped: the output claimed cellgate's name, so it is shown as text only")
        out = {k: v for k, v in out.items() if k == "text/plain"}
        added.append(f"[cellgate: the kernel sent this output in cellgate's own name ({', '.join(forged)[:300]}); "
                     "it is not the gate's record, so it is shown as text only; the journal keeps it as data]")
    if added:
        plain = out.get("text/plain", "")
        gap = "\n" if plain and not plain.endswith("\n") else ""
        out["text/plain"] = plain + gap + "\n".join(added)
    kept = {k: v for k, v in metadata.items() if k in out and k != "cellgate"}
    if notes:
        kept["cellgate"] = {"sanitized": notes}
    return out, kept, notes


def _cellgates(name: str) -> bool:
    """A MIME type or metadata key in cellgate's own name (MIME types compare without case)."""
    return name == "cellgate" or name.strip().lower().startswith(CELLGATE_MIME_PREFIX)


def sanitize_output(output: dict[str, Any], trusted: Iterable[str] = ()) -> dict[str, Any]:
    """An nbformat output as a frontend may see it (stream, error and clear_output pass unchanged)."""
    if output.get("output_type") not in ("display_data", "execute_result"):
        return output
    data, metadata, _ = sanitize_bundle(output.get("data"), output.get("metadata"), trusted)
    return {**output, "data": data, "metadata": metadata}
