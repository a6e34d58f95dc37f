"""The sanitizer's exact outputs, notes and metadata: each assertion kills mutants of audit/sanitize.py that the
behaviour tests in test_sanitize.py let through (scripts/mutation sanitize; CONTRIBUTING, "Mutation testing")."""

from __future__ import annotations

import base64

from cellgate.gate.audit.sanitize import (
    MAX_MARKDOWN,
    clean_html,
    defuse_tex,
    mathjax_text,
    sanitize_bundle,
    sanitize_output,
    svg_as_image,
    untrusted_markdown,
)

REMOVED_NOTE = ("[cellgate removed output of type {}: kernel output may not run script in a frontend; the journal "
                "keeps it as data]")


def test_plain_text_and_json_pass_as_data_and_plain_lines_are_joined() -> None:
    data, metadata, notes = sanitize_bundle({"text/plain": ["a\n", "b"], "application/json": {"k": [1]}})
    assert data == {"text/plain": "a\nb", "application/json": {"k": [1]}}
    assert metadata == {} and notes == []


def test_plain_text_that_is_not_text_is_removed_with_a_note() -> None:
    data, metadata, notes = sanitize_bundle({"text/plain": {"x": 1}})
    assert notes == [{"mime": "text/plain", "action": "removed (not text)"}]
    assert data == {"text/plain": REMOVED_NOTE.format("text/plain")}
    assert metadata == {"cellgate": {"sanitized": notes}}
    # a list holding anything but strings is not text
    assert sanitize_bundle({"text/plain": ["a", 1]})[2] == [{"mime": "text/plain", "action": "removed (not text)"}]


def test_base64_images_pass_and_anything_else_in_an_image_type_is_removed() -> None:
    for mime in ("image/png", "image/jpeg", "image/gif", "image/webp"):
        data, _, notes = sanitize_bundle({mime: "iVBO Rw0=\n", "text/plain": "p"})
        assert data == {mime: "iVBO Rw0=\n", "text/plain": "p"} and notes == []
        data, _, notes = sanitize_bundle({mime: "<svg onload=x>", "text/plain": "p"})
        assert notes == [{"mime": mime, "action": "removed (not base64 image data)"}]
        assert data == {"text/plain": "p\n" + REMOVED_NOTE.format(mime)}
    assert sanitize_bundle({"image/png": ["iVBO", "Rw0="]})[0] == {"image/png": "iVBORw0="}
    assert sanitize_bundle({"image/png": 5})[2] == [{"mime": "image/png", "action": "removed (not base64 image data)"}]


def test_html_is_noted_only_when_the_cleaner_changed_it() -> None:
    assert sanitize_bundle({"text/html": "<b>ok</b>"}) == ({"text/html": "<b>ok</b>"}, {}, [])
    data, _, notes = sanitize_bundle({"text/html": ["<b>a</b>", "<script>x</script>"]})
    assert data == {"text/html": "<b>a</b>"} and notes == [{"mime": "text/html", "action": "cleaned"}]
    assert sanitize_bundle({"text/html": 3})[2] == [{"mime": "text/html", "action": "removed"}]


def test_markdown_at_the_limit_is_rendered_and_one_over_is_text() -> None:
    at = "a" * MAX_MARKDOWN
    data, _, notes = sanitize_bundle({"text/markdown": at})
    assert data == {"text/html": f"<p>{at}</p>\n"}
    assert notes == [{"mime": "text/markdown", "action": "rendered to sanitized text/html"}]
    over = at + "b"
    data, _, notes = sanitize_bundle({"text/markdown": over, "text/plain": "mine"})
    assert data == {"text/plain": "mine"}  # the kernel's own text/plain is kept
    assert notes == [{"mime": "text/markdown", "action": f"shown as text/plain (over {MAX_MARKDOWN} characters)"}]
    assert sanitize_bundle({"text/markdown": ["# a", "b"]})[0] == {"text/html": "<h1>ab</h1>\n"}
    assert sanitize_bundle({"text/markdown": 1})[2] == [{"mime": "text/markdown", "action": "removed"}]


def test_markdown_and_svg_are_joined_into_html_unless_the_kernel_sent_html() -> None:
    svg = "<svg><script>x</script></svg>"
    data, _, notes = sanitize_bundle({"text/markdown": "*m*", "image/svg+xml": [svg]})
    assert data == {"text/html": svg_as_image(svg) + "\n<p><em>m</em></p>\n"}
    assert notes == [{"mime": "image/svg+xml", "action": "shown as an image in text/html"},
                     {"mime": "text/markdown", "action": "rendered to sanitized text/html"}]
    data, _, _ = sanitize_bundle({"text/markdown": "*m*", "text/html": "<i>h</i>"})
    assert data == {"text/html": "<i>h</i>"}
    assert sanitize_bundle({"image/svg+xml": {}})[2] == [{"mime": "image/svg+xml", "action": "removed"}]


def test_svg_is_an_image_of_its_utf8_bytes() -> None:
    svg = "<svg>\u00e9\ud800</svg>"  # a lone surrogate is replaced, not an error
    encoded = base64.b64encode(svg.encode("utf-8", "replace")).decode()
    assert svg_as_image(svg) == (f'<img src="data:image/svg+xml;base64,{encoded}" '
                                 'alt="SVG image (shown as an image by cellgate)">')
    assert clean_html(svg_as_image("<svg/>")) == svg_as_image("<svg/>")  # the cleaner keeps it


def test_latex_is_defused_and_noted_only_when_changed() -> None:
    assert sanitize_bundle({"text/latex": "$x^2$"}) == ({"text/latex": "$x^2$"}, {}, [])
    data, _, notes = sanitize_bundle({"text/latex": ["$\\hr", "ef{u}{x}$"]})
    assert data == {"text/latex": "$\\text{(href removed)}{u}{x}$"}
    assert notes == [{"mime": "text/latex", "action": "cleaned"}]
    assert sanitize_bundle({"text/latex": 2})[2] == [{"mime": "text/latex", "action": "removed"}]


def test_defuse_tex_names_each_active_command_and_keeps_longer_names() -> None:
    assert defuse_tex("\\href{a}\\hrefx \\def\\newcommand \\htmlData") == (
        "\\text{(href removed)}{a}\\hrefx \\text{(def removed)}\\text{(newcommand removed)} "
        "\\text{(htmlData removed)}")
    assert defuse_tex("\\alpha \\frac{1}{2}") == "\\alpha \\frac{1}{2}"


def test_mathjax_text_drops_wbr_and_comments_until_none_is_left() -> None:
    assert mathjax_text("a<wbr>b<WBR class=x>c<!-- x\n y -->d<!--e-->f<!-- open") == "abcdf"
    assert mathjax_text("a<!-- x --!>b") == "ab"
    assert mathjax_text("\\mml<wb<wbr>r>Token") == "\\mmlToken"
    assert mathjax_text("a<br>b<wbrx>") == "a<br>b<wbrx>"


def test_other_types_are_removed_with_a_note_naming_them() -> None:
    data, metadata, notes = sanitize_bundle({"application/javascript": "x()", "text/plain": "p\n",
                                             "application/x-widget": {}},
                                            {"application/javascript": {"a": 1}, "text/plain": {"b": 2}})
    assert notes == [{"mime": "application/javascript", "action": "removed"},
                     {"mime": "application/x-widget", "action": "removed"}]
    assert data == {"text/plain": "p\n" + REMOVED_NOTE.format("application/javascript, application/x-widget")}
    # metadata is kept only for the types that stay
    assert metadata == {"text/plain": {"b": 2}, "cellgate": {"sanitized": notes}}


def test_an_empty_or_malformed_bundle_says_nothing_was_left() -> None:
    for data in ({}, None, ["text/plain"]):
        out, metadata, notes = sanitize_bundle(data, "not a dict")
        assert out == {"text/plain": REMOVED_NOTE.format("none")} and metadata == {} and notes == []


def test_long_mime_names_are_cut_in_notes() -> None:
    mime = "application/x-" + "y" * 300
    notes = sanitize_bundle({mime: "v"})[2]
    assert notes == [{"mime": mime[:200], "action": "removed"}]


def test_trusted_types_pass_exactly_but_cellgate_own_never() -> None:
    value = {"v": 1}
    data, _, notes = sanitize_bundle({"application/x-widget": value}, trusted=iter(["application/x-widget"]))
    assert data["application/x-widget"] is value and notes == []
    data, _, notes = sanitize_bundle({"application/vnd.cellgate.call+json": {}, "text/plain": "t"},
                                     trusted=["application/vnd.cellgate.call+json"])
    assert "application/vnd.cellgate.call+json" not in data and notes[0]["action"].startswith("forged: ")


def test_forged_cellgate_names_leave_only_text_that_says_so() -> None:
    forgery = {"text/plain": "hi", "text/html": "<b>x</b>", " Application/VND.Cellgate.Call+json": {}}
    data, metadata, notes = sanitize_bundle(forgery, {"cellgate": {"sanitized": []}, "text/html": {"m": 1},
                                                      "text/plain": {"p": 1}})
    own = "forged: cellgate's own name from the kernel; removed (only the host writes it)"
    assert notes == [
        {"mime": "metadata.cellgate", "action": own},
        {"mime": " Application/VND.Cellgate.Call+json", "action": own},
        {"mime": "text/html", "action": "dropped: the output claimed cellgate's name, so it is shown as text only"},
    ]
    assert data == {"text/plain": "hi\n[cellgate: the kernel sent this output in cellgate's own name (cellgate,  "
                                  "Application/VND.Cellgate.Call+json); it is not the gate's record, so it is shown "
                                  "as text only; the journal keeps it as data]"}
    assert metadata == {"text/plain": {"p": 1}, "cellgate": {"sanitized": notes}}


def test_a_forgery_alone_has_no_removed_note_and_its_names_are_cut() -> None:
    forged = "application/vnd.cellgate." + "z" * 400
    data, _, notes = sanitize_bundle({forged: 1})
    assert data == {"text/plain": f"[cellgate: the kernel sent this output in cellgate's own name ({forged[:300]}); "
                                  "it is not the gate's record, so it is shown as text only; the journal keeps it "
                                  "as data]"}
    assert [n["action"][:7] for n in notes] == ["forged:"]
    # a near name is not cellgate's
    assert sanitize_bundle({"application/vnd.cellgatex": 1})[2] == [
        {"mime": "application/vnd.cellgatex", "action": "removed"}]
    assert sanitize_bundle({"text/plain": "t"}, {"cellgatex": 1, "Cellgate": 2})[1] == {}


def test_plain_text_ending_in_a_newline_gets_no_extra_gap() -> None:
    assert sanitize_bundle({"text/plain": "", "x/y": 1})[0] == {"text/plain": REMOVED_NOTE.format("x/y")}
    assert sanitize_bundle({"text/plain": "a\n", "x/y": 1})[0] == {"text/plain": "a\n" + REMOVED_NOTE.format("x/y")}


def test_links_and_urls_other_than_img_src_refuse_data_urls() -> None:
    assert clean_html('<a href=" DATA:text/html,x">a</a>') == '<a rel="noopener noreferrer nofollow">a</a>'
    assert clean_html('<img src="data:image/svg+xml;base64,AA">') == '<img src="data:image/svg+xml;base64,AA">'
    assert clean_html('<img src="DATA:IMAGE/GIF,AA">') == '<img src="DATA:IMAGE/GIF,AA">'
    assert clean_html('<img src="data:image/bmp;base64,AA">') == "<img>"
    assert clean_html('<img src="x data:image/png,AA">') == "<img>"
    assert clean_html('<img alt="data:x" title="t">') == '<img alt="data:x" title="t">'
    assert clean_html('<a href="/rel">r</a>') == '<a href="/rel" rel="noopener noreferrer nofollow">r</a>'
    assert clean_html('<a href="mailto:a@b">m</a><q cite="data:x">q</q>') == (
        '<a href="mailto:a@b" rel="noopener noreferrer nofollow">m</a><q>q</q>')


def test_the_cleaner_drops_wbr_comments_and_dangerous_content() -> None:
    assert clean_html("a<wbr>b<!-- c -->d<style>s</style><title>t</title><textarea>x</textarea>e") == "abde"
    assert clean_html("<b>\\style{x}</b>") == "<b>\\text{(style removed)}{x}</b>"


def test_untrusted_markdown_names_what_was_removed() -> None:
    body, removed = untrusted_markdown('<a href="data:x">l</a> <img src="http://x/i.png"> <script>s</script> $\\href{u}$')
    assert removed == ["the href of an a", "the src of an img", "a <script> element", "the TeX command href"]
    assert body.startswith('<div class="cellgate-untrusted"><p>')
    assert "[cellgate removed from this text: the href of an a, the src of an img, a &lt;script&gt; element, " \
           "the TeX command href; the journal keeps it as written]" in body
    for c in "$\\{}@`\n\r":
        assert c not in body
    assert "&#36;&#92;text&#123;(href removed)&#125;&#123;u&#125;&#36;" in body


def test_untrusted_markdown_notes_a_consonant_element_with_a_and_each_removal_once() -> None:
    _, removed = untrusted_markdown('<q cite="data:x">q</q> <q cite="data:y">r</q> <video poster="data:z"></video>')
    assert removed == ["the cite of a q", "the poster of a video", "a <video> element"]
    _, removed = untrusted_markdown("<iframe></iframe><iframe></iframe>")
    assert removed == ["a <iframe> element"]


def test_untrusted_markdown_clean_text_has_no_note_and_no_trailing_newline() -> None:
    body, removed = untrusted_markdown("*hi*")
    assert removed == [] and body == '<div class="cellgate-untrusted"><p><em>hi</em></p></div>'


def test_untrusted_markdown_at_and_over_the_limit() -> None:
    at = "<" + "a" * (MAX_MARKDOWN - 1)
    body, removed = untrusted_markdown(at)
    assert body.startswith('<div class="cellgate-untrusted"><p>&lt;aaa') and removed == []
    body, removed = untrusted_markdown(at + "<")
    assert body == '<div class="cellgate-untrusted"><pre>&lt;' + "a" * (MAX_MARKDOWN - 1) + "&lt;</pre></div>"
    assert removed == []


def test_sanitize_output_touches_display_and_results_only() -> None:
    for kind in ("display_data", "execute_result"):
        out = sanitize_output({"output_type": kind, "data": {"text/html": "<script>x</script>"}, "metadata": {},
                               "transient": 1}, trusted=[])
        assert out["data"] == {"text/html": ""} and out["transient"] == 1
        assert out["metadata"] == {"cellgate": {"sanitized": [{"mime": "text/html", "action": "cleaned"}]}}
    trusted = sanitize_output({"output_type": "display_data", "data": {"x/y": 1}}, trusted=["x/y"])
    assert trusted["data"] == {"x/y": 1} and trusted["metadata"] == {}
    error = {"output_type": "error", "data": {"x/y": 1}}
    assert sanitize_output(error) is error


def test_untrusted_markdown_cleans_like_an_output() -> None:
    body, removed = untrusted_markdown('[m](mailto:a@b) a<!-- c -->b <style>s{}</style> x')
    assert 'href="mailto:a&#64;b" rel="noopener noreferrer nofollow"' in body
    assert "<!--" not in body and "s&#123;&#125;" not in body and removed == ["a <style> element"]


def test_keys_of_any_type_are_sorted_as_text_and_a_trusted_type_does_not_end_the_bundle() -> None:
    data, _, notes = sanitize_bundle({1: "x", "a/b": "y", "text/plain": "p"}, trusted=["a/b"])
    assert data == {"a/b": "y", "text/plain": "p\n" + REMOVED_NOTE.format("1")}
    assert notes == [{"mime": "1", "action": "removed"}]


def test_a_forgery_with_a_removed_type_says_both_on_their_own_lines() -> None:
    data, _, _ = sanitize_bundle({"application/vnd.cellgate.x": 1, "x/y": 2})
    assert data["text/plain"].split("\n")[0] == REMOVED_NOTE.format("x/y")
    assert data["text/plain"].split("\n")[1].startswith("[cellgate: the kernel sent this output")


def test_sanitize_output_keeps_the_metadata_of_what_stays() -> None:
    out = sanitize_output({"output_type": "display_data", "data": {"text/plain": "p"},
                           "metadata": {"text/plain": {"m": 1}}})
    assert out["metadata"] == {"text/plain": {"m": 1}}
