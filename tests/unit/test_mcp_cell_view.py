"""What `cellgate mcp serve`'s execute_python returns, on its own (end to end with Claude Code:
tests/sandbox/test_claude_code.py): the output in structuredContent under a declared outputSchema, images as
image content, everything from the sandbox bounded and checked."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import jsonschema
from mcp import Client

from cellgate.extensions.mcp.cell_view import CellOutput, cell_content, cell_images, cell_output, cell_text
from cellgate.extensions.mcp.serve import build_server
from cellgate.gate import CellResult, load_settings

PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
                         "RU5ErkJggg==")


def cell(*outputs: dict[str, Any], status: str = "ok", limits_hit: tuple[str, ...] = ()) -> CellResult:
    return CellResult(status=status, outputs=list(outputs), calls=[], execution_count=1, limits_hit=list(limits_hit),
                      error=None)


def stream(name: str, text: str) -> dict[str, Any]:
    return {"output_type": "stream", "name": name, "text": text}


def shown(data: dict[str, Any]) -> dict[str, Any]:
    return {"output_type": "display_data", "data": data, "metadata": {}}


def figure(raw: bytes | str, mime: str = "image/png") -> dict[str, Any]:
    encoded = raw if isinstance(raw, str) else base64.encodebytes(raw).decode()  # nbformat keeps line breaks
    return shown({mime: encoded, "text/plain": "<Figure size 640x480 with 1 Axes>"})


def error(ename: str, evalue: str, traceback: list[str]) -> dict[str, Any]:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback}


def test_execute_python_declares_its_output_schema_and_the_output_fits_it() -> None:
    async def listed() -> dict[str, Any]:
        async with Client(build_server(load_settings(None), {}, single_client=True)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["execute_python"].output_schema
        assert schema is not None
        return schema

    schema = asyncio.run(asyncio.wait_for(listed(), 60))
    assert schema == CellOutput.model_json_schema()
    assert {"stdout", "stderr", "error"} <= set(schema["required"])
    for result in (cell(stream("stdout", "10000 312\n")), cell(error("KeyError", "'x'", []), status="error"),
                   cell(status="timeout", limits_hit=("output",))):
        jsonschema.validate(cell_output(result, "h").model_dump(mode="json"), schema)


def test_stdout_stderr_and_the_error_each_have_their_field_and_the_text_keeps_their_order() -> None:
    result = cell(stream("stdout", "rows: 3\n"), stream("stderr", "warning: slow\n"),
                  {"output_type": "execute_result", "data": {"text/plain": "   a\n0  1"}, "metadata": {},
                   "execution_count": 1},
                  error("ZeroDivisionError", "division by zero",
                        ["\x1b[0;31m---------\x1b[0m", "\x1b[0;32mCell In[1], line 3\x1b[0m\n----> 3 1/0",
                         "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"]), status="error")
    seen = cell_output(result, "abc").model_dump(mode="json")
    assert seen == {"session": "abc", "status": "error", "stdout": "rows: 3\n   a\n0  1\n",
                    "stderr": "warning: slow\n",
                    "error": "Traceback (last lines):\n---------\nCell In[1], line 3\n----> 3 1/0\n"
                             "ZeroDivisionError: division by zero\n",
                    "calls": 0, "notebook": "cellgate://sessions/abc/notebook",
                    "writes": {"committed": [], "answered": [], "failed": [], "unknown": [], "reads": 0}}
    assert cell_text(result) == "rows: 3\nwarning: slow\n   a\n0  1\n" + seen["error"]
    assert cell_text(cell()) == "(the program printed nothing)\n"


def test_a_stopped_cell_says_why_in_the_error_field() -> None:
    seen = cell_output(cell(stream("stdout", "started\n"), status="timeout", limits_hit=("output",)), "h")
    assert (seen.stdout, seen.error) == ("started\n", "[the cell ended with status 'timeout']\n[limits hit: output]\n")


def test_a_chart_is_image_content_and_a_note_not_its_figure_text() -> None:
    result = cell(figure(PIXEL), stream("stdout", "done\n"))
    content = cell_content(result)
    assert [c.type for c in content] == ["text", "image"]
    assert (content[1].mime_type, base64.b64decode(content[1].data)) == ("image/png", PIXEL)
    note = f"[image 1: image/png, {len(PIXEL)} bytes, attached]\n"
    assert cell_output(result, "h").stdout == note + "done\n"
    assert "Figure" not in cell_text(result) and cell_text(result) == note + "done\n"


def test_images_from_the_sandbox_pass_only_when_they_are_what_they_claim_within_the_limit() -> None:
    fake_png = base64.b64encode(b"<svg onload=alert(1)>").decode()
    result = cell(figure(fake_png), figure("not base64 at all!"), figure(PIXEL + b"\x00" * 2000),
                  figure(b"GIF89a" + b"\x00" * 10, "image/gif"), figure(PIXEL, "image/jpeg"))
    assert [(i.mime_type, base64.b64decode(i.data)[:6]) for i in cell_images(result, limit=1000)] == [
        ("image/gif", b"GIF89a")]
    said = cell_output(result, "h", limit=1000).stdout
    assert said.count("that is not valid image/png data was left out") == 2
    assert f"[an image (image/png, {len(PIXEL) + 2000:,} bytes) is over the 1,000 byte limit" in said
    assert "[image 1: image/gif, 16 bytes, attached]" in said
    assert "not valid image/jpeg data" in said and "alert" not in said


def test_long_output_is_trimmed_within_the_budget_and_stderr_keeps_its_share() -> None:
    result = cell(stream("stdout", "o" * 50_000 + "END"), stream("stderr", "#" * 50_000 + "LAST"))
    seen = cell_output(result, "h", budget=2_000)
    assert seen.stdout.endswith("END") and seen.stderr.endswith("LAST")
    assert "characters dropped here to fit the output budget; the full output is in the session's audit " \
           "notebook" in seen.stdout
    note = len(seen.stderr) - seen.stderr.count("#") - len("LAST")  # trim's note of what it dropped
    assert seen.stderr.count("#") == 500 - len("LAST") - 1  # a quarter of the budget, head and tail
    assert len(seen.stdout) + len(seen.stderr) <= 2_000 + 2 * note
    short = cell(stream("stdout", "x" * 100), stream("stderr", "y" * 1_800))
    assert cell_output(short, "h", budget=2_000).stderr == "y" * 1_800  # a short stdout leaves stderr the rest
    assert len(cell_text(result, budget=2_000)) < 2_200
