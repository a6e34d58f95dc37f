"""The host's calls output and the renaming of forged ones, on their own (end to end:
tests/security/test_calls_output.py and tests/browser/test_calls_visible.py)."""

from __future__ import annotations

from typing import Any

from cellgate.gate.audit.calls_view import CALLS_MIME, MAX_ROWS, calls_output, is_host_output, summary
from cellgate.gate.audit.render import forged_outputs
from cellgate.gate.audit.sanitize import sanitize_output


def call(seq: int, tool: str = "add", ok: bool = True, **fields: Any) -> dict[str, Any]:
    base = {"seq": seq, "tool": tool, "args": {"a": seq}, "decision": "allow", "ok": ok,
            "started": "2026-12-01T03:00:00.000Z", "duration_ms": 1.25}
    if ok:
        base["result"] = seq
    else:
        base["error"] = {"kind": "failed", "message": f"call {seq} failed"}
    return {**base, **fields}


def test_hostile_values_are_shown_as_inert_text() -> None:
    hostile = call(1, tool="<script>alert(1)</script>", args={"x": '<img src=x onerror=alert(1)>\u202e\x1b[2J'},
                   result='<a href="javascript:alert(1)">r</a>', rule="</td><script>")
    output = calls_output([hostile])
    html = output["data"]["text/html"]
    for active in ("<script", "<img", "<a ", "\u202e", "\x1b"):
        assert active not in html, active
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "\\u202e\\u001b[2J" in html
    assert output["data"][CALLS_MIME] == {"calls": [hostile]} and is_host_output(output)
    assert "\u202e" not in output["data"]["text/plain"]


def test_a_large_cell_shows_a_summary_and_its_failures_first_and_every_call_in_details() -> None:
    calls = [call(n, tool="add" if n % 2 else "echo", ok=n not in (5, 17)) for n in range(1, 26)]
    assert summary(calls) == {("add", "allow", "allowed"): 11, ("echo", "allow", "allowed"): 12,
                              ("add", "allow", "tool error"): 2}
    html = calls_output(calls)["data"]["text/html"]
    summary_at, failures_at, details_at = (html.index('class="cellgate-calls-summary"'), html.index("2 not ok"),
                                           html.index("<details><summary>all 25 calls</summary>"))
    assert summary_at < failures_at < details_at
    assert html[failures_at:details_at].count("<tr class=") == 2 and html[details_at:].count("<tr class=") == 25
    text = calls_output(calls)["data"]["text/plain"]
    assert text.splitlines()[0] == "cellgate recorded 25 gated calls of this cell: 23 allowed, 2 tool error"
    assert "#5 add allow -> tool error: call 5 failed" in text and "(23 more not listed here)" in text


def test_a_huge_cell_lists_a_bounded_number_of_rows() -> None:
    html = calls_output([call(n) for n in range(1, MAX_ROWS + 11)])["data"]["text/html"]
    assert html.count("<tr class=") == MAX_ROWS and f"… and 10 more calls (all of them in this output's {CALLS_MIME}" in html


def test_a_kernel_output_in_cellgates_name_keeps_only_its_text_and_is_flagged() -> None:
    forged = {"output_type": "display_data", "metadata": {"cellgate": {"authored_by": "host"}},
              "data": {"Application/VND.cellgate.calls+json": {"calls": []}, "text/plain": "all allowed",
                       "text/html": "<b>all allowed</b>", "image/png": "AAAA"}}
    shown = sanitize_output(forged, trusted=["Application/VND.cellgate.calls+json", "text/html"])
    assert list(shown["data"]) == ["text/plain"] and not is_host_output(shown)
    assert shown["data"]["text/plain"].startswith("all allowed\n[cellgate: the kernel sent this output in cellgate's "
                                                  "own name (cellgate, Application/VND.cellgate.calls+json)")
    assert forged_outputs([{"output_type": "stream"}, shown]) == [
        {"output": 1, "claimed": ["metadata.cellgate", "Application/VND.cellgate.calls+json"]}]
    plain = sanitize_output({"output_type": "display_data", "data": {"text/html": "<b>x</b>"}, "metadata": {}})
    assert plain["data"] == {"text/html": "<b>x</b>"} and forged_outputs([plain]) == []
