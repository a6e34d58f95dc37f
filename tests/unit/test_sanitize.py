"""The output sanitizer on its own (the end-to-end cases are in tests/security/test_frontend_outputs.py)."""

from __future__ import annotations

from cellgate.gate.audit.sanitize import MAX_MARKDOWN, sanitize_bundle, sanitize_output


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
