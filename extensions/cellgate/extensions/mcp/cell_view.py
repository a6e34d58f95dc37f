"""What an MCP client gets back from ``execute_python``: the cell's output three ways (pure functions).

Clients differ in which part of a tool result they hand their model: Claude Code forwards the
``structuredContent`` alone when there is one, other clients the text content. So both carry the whole output
(``cell_text`` in order; ``CellOutput``, the tool's declared ``outputSchema``, split into stdout, stderr and the
error), each trimmed with the gate's ``trim`` to the same budget ``cellgate run`` uses; the audit notebook keeps
everything. Images the cell displayed (a chart's ``plt.show()``, ``display(Image(...))``) go back as MCP image
content, not as their ``<Figure ...>`` text. Everything here came from the sandbox: an image is passed on only
as valid base64 of a bitmap type whose bytes start as that type does, within ``IMAGE_LIMIT`` bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from mcp_types import ContentBlock, ImageContent, TextContent
from pydantic import BaseModel, Field

from cellgate.gate import CellResult
from cellgate.gate.ext import trim

__all__ = ["IMAGE_LIMIT", "OUTPUT_BUDGET", "CellOutput", "cell_content", "cell_images", "cell_output", "cell_text",
           "writes_text", "writes_view"]

OUTPUT_BUDGET = 20_000  # characters of a cell's output in the tool result, as `cellgate run`'s [agent] output_budget
IMAGE_LIMIT = 512 * 1024  # bytes of one image, as `cellgate run`'s [agent] image_limit_kb
WHERE = "the session's audit notebook"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TRACEBACK_LINES = 8
SIGNATURES = {"image/png": (b"\x89PNG\r\n\x1a\n",), "image/jpeg": (b"\xff\xd8\xff",),
              "image/gif": (b"GIF87a", b"GIF89a"), "image/webp": (b"RIFF",)}
TOOL = "execute_python"
WRITES_LISTED = 20  # writes per outcome in a structuredContent whose writes are over the budget (as Writes.summary)
RETRY_HINT = f"call {TOOL} again with retry: true"


class CellOutput(BaseModel):
    """The structuredContent of execute_python: what the cell printed and how it ended."""

    session: str = Field(description="the handle to pass back as `session` to keep this session's variables")
    status: str = Field(description="ok, error, or why the cell stopped (timeout, interrupted, memory, killed, ...)")
    stdout: str = Field(description="what the program printed, and the text of the values it displayed, in order "
                                    "(images are attached as image content and noted here)")
    stderr: str = Field(description="what the program wrote to stderr")
    error: str | None = Field(description="the exception that ended the cell (last traceback lines), or null")
    calls: int = Field(description="how many gated tool calls the cell made")
    writes: dict[str, Any] = Field(description=(
        "the cell's writes by outcome: committed (done in the world), answered (done by an earlier attempt, "
        "answered from the record by this retry), failed (not done), unknown (may or may not have happened); each "
        "{seq, tool, args, outcome, result_id?, error?, answered_from?}; reads: how many reads it made. When they "
        f"would not fit the output budget, at most {WRITES_LISTED} per outcome are listed, each with `line` (the "
        "call with its arguments shortened, in one line) in place of args, and left_off counts the others. After a failure, fix the code and call "
        f"{TOOL} with retry: true: the writes done are answered from the record, not made again"))
    notebook: str = Field(description="the resource URI of the session's audit notebook, which keeps every output")


def _image(output: dict[str, Any], limit: int) -> tuple[str, str, int] | None:
    """(MIME type, base64, size) of an output's image, or None when it shows none (or one cellgate will not pass)."""
    data = output.get("data") if output.get("output_type") in ("execute_result", "display_data") else None
    if not isinstance(data, dict):
        return None
    for mime, starts in SIGNATURES.items():
        raw = data.get(mime)
        if isinstance(raw, str):
            packed = "".join(raw.split())
            size = len(packed) * 3 // 4 - len(packed[-2:]) + len(packed[-2:].rstrip("="))
            if size > limit:  # not decoded: its size is all the note needs
                return mime, "", size
            try:
                decoded = base64.b64decode(packed, validate=True)
            except (binascii.Error, ValueError):
                return mime, "", 0
            ok = decoded.startswith(starts) and (mime != "image/webp" or decoded[8:12] == b"WEBP")
            return mime, packed if ok else "", len(decoded) if ok else 0
    return None


def _attachable(found: tuple[str, str, int], limit: int) -> bool:
    return 0 < found[2] <= limit


def _image_note(found: tuple[str, str, int], number: int, limit: int) -> str:
    mime, _, size = found
    if not size:
        return f"[an image ({mime}) that is not valid {mime} data was left out; it is in {WHERE}]\n"
    if size > limit:
        return f"[an image ({mime}, {size:,} bytes) is over the {limit:,} byte limit for the model; it is in {WHERE}]\n"
    return f"[image {number}: {mime}, {size:,} bytes, attached]\n"


def _error_text(output: dict[str, Any]) -> str:
    lines = [ANSI.sub("", str(line)) for line in output.get("traceback") or []]
    frames = "\n".join(lines).strip().splitlines()  # ipykernel sends one string per frame
    short = frames[-TRACEBACK_LINES:]
    head = f"{output.get('ename')}: {output.get('evalue')}"
    if short and short[-1].strip() == head.strip():
        short = short[:-1]
    return ("Traceback (last lines):\n" + "\n".join(short) + "\n" if short else "") + head + "\n"


def _status_note(result: CellResult) -> str:
    note = "" if result.status in ("ok", "error") else f"[the cell ended with status {result.status!r}]\n"
    return note + (f"[limits hit: {', '.join(result.limits_hit)}]\n" if result.limits_hit else "")


def _pieces(result: CellResult, limit: int) -> list[tuple[str, str]]:
    """(stdout | stderr | error, text) of each output in order; an image stands as its note."""
    pieces: list[tuple[str, str]] = []
    attached = 0
    for output in result.outputs:
        kind = output.get("output_type")
        if kind == "stream":
            pieces.append(("stderr" if output.get("name") == "stderr" else "stdout", str(output.get("text", ""))))
        elif kind == "error":
            pieces.append(("error", _error_text(output)))
        elif (found := _image(output, limit)) is not None:
            attached += _attachable(found, limit)
            pieces.append(("stdout", _image_note(found, attached, limit)))
        elif kind in ("execute_result", "display_data"):
            plain = (output.get("data") or {}).get("text/plain")
            if isinstance(plain, str) and plain:
                pieces.append(("stdout", plain + "\n"))
    return pieces


def writes_text(result: CellResult, budget: int = OUTPUT_BUDGET) -> str:
    """What the cell's writes did and, after a failure, how to retry (``Writes.summary``); '' without writes.
    At most a quarter of ``budget`` (the summary lists at most 20 writes per outcome)."""
    writes = result.writes
    if result.ok and not (writes.answered or writes.unknown):  # an ok cell's writes all just ran: its output says
        return ""                                               # enough (and structuredContent lists them)
    summary = writes.summary(failed_cell=not result.ok, retry_hint=RETRY_HINT)
    return trim(summary, budget // 4, WHERE) + "\n" if summary else ""


def writes_view(result: CellResult, budget: int = OUTPUT_BUDGET) -> dict[str, Any]:
    """``result.writes.as_dict()``, or when that is over ``budget`` characters (long arguments), at most
    ``WRITES_LISTED`` writes per outcome, each with its one-line text (``line``) for its arguments, and
    ``left_off``: how many were not listed."""
    writes = result.writes
    whole = writes.as_dict()
    if len(json.dumps(whole, ensure_ascii=False, default=str)) <= budget:
        return whole
    short: dict[str, Any] = {"reads": writes.reads, "left_off": 0}
    for name, listed in (("committed", writes.committed), ("answered", writes.answered),
                         ("failed", writes.failed), ("unknown", writes.unknown)):
        short[name] = [{**{k: v for k, v in w.as_dict().items() if k != "args"}, "line": w.line()}
                       for w in listed[:WRITES_LISTED]]
        short["left_off"] += max(0, len(listed) - WRITES_LISTED)
    return short


def cell_text(result: CellResult, budget: int = OUTPUT_BUDGET, limit: int = IMAGE_LIMIT) -> str:
    """Everything the cell showed, in order, trimmed, then what its writes did: the text content of the tool
    result."""
    writes = writes_text(result, budget)
    text = "".join(piece for _, piece in _pieces(result, limit)) or "(the program printed nothing)\n"
    return trim(text + _status_note(result), budget - len(writes), WHERE) + writes


def cell_output(result: CellResult, session: str, budget: int = OUTPUT_BUDGET,
                limit: int = IMAGE_LIMIT) -> CellOutput:
    """The structuredContent; stdout, stderr and the error share ``budget`` (stderr and the error at least a
    quarter each when all are long)."""
    pieces = _pieces(result, limit)
    stdout, stderr, error = ("".join(p for kind, p in pieces if kind == name) for name in ("stdout", "stderr", "error"))
    error += _status_note(result)
    error = trim(error, max(budget // 4, budget - len(stdout) - len(stderr)), WHERE)
    stderr = trim(stderr, max(budget // 4, budget - len(stdout) - len(error)), WHERE)
    stdout = trim(stdout, max(budget // 4, budget - len(stderr) - len(error)), WHERE)
    return CellOutput(session=session, status=result.status, stdout=stdout, stderr=stderr, error=error or None,
                      calls=len(result.calls), writes=writes_view(result, budget),
                      notebook=f"cellgate://sessions/{session}/notebook")


def cell_images(result: CellResult, limit: int = IMAGE_LIMIT) -> list[ImageContent]:
    """The images the cell displayed that may go to the model, in order."""
    found = (_image(output, limit) for output in result.outputs)
    return [ImageContent(type="image", data=image[1], mime_type=image[0])
            for image in found if image is not None and _attachable(image, limit)]


def cell_content(result: CellResult, budget: int = OUTPUT_BUDGET, limit: int = IMAGE_LIMIT) -> list[ContentBlock]:
    """The tool result's content: the text, then the images."""
    return [TextContent(type="text", text=cell_text(result, budget, limit)), *cell_images(result, limit)]
