"""What the model sees of a cell: its printed output, trimmed, its images, and its writes (pure functions).

The audit notebook always keeps the whole output; the model gets a budget of
characters (head and tail kept, with a note of what was dropped) so one noisy
program cannot flood its context. After the output, a cell that did not end
ok (or that a retry answered in part from the record) says what its writes
did (``Writes.summary``), outside the budget so a long output never cuts it.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from cellgate.gate import CellResult
from cellgate.gate.ext import trim

__all__ = ["cell_view", "trim", "writes_text"]

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
TRACEBACK_LINES = 8


def _error_text(output: dict[str, Any]) -> str:
    lines = [ANSI.sub("", line) for line in output.get("traceback") or []]
    # ipykernel tracebacks are one string per frame; keep the last frames, which name the failing line.
    frames = "\n".join(lines).strip().splitlines()
    short = frames[-TRACEBACK_LINES:] if frames else []
    head = f"{output.get('ename')}: {output.get('evalue')}"
    if short and short[-1].strip() == head.strip():
        short = short[:-1]
    return ("Traceback (last lines):\n" + "\n".join(short) + "\n" if short else "") + head + "\n"


def writes_text(result: CellResult, retry_hint: str) -> str:
    """What the cell's writes did, for the model: for a cell that did not end ok (what is done in the world, and how
    to retry without repeating it), or one with writes answered from the record or of unknown outcome; empty for
    an ok cell whose writes all ran now (the output says what it did, and every write would add a line)."""
    writes = result.writes
    if result.ok and not (writes.answered or writes.unknown):
        return ""
    return writes.summary(failed_cell=not result.ok, retry_hint=retry_hint)


def cell_view(result: CellResult, where: str, budget: int, image_limit: int,
              retry_hint: str = "call execute_python again with retry: true") -> list[dict[str, Any]]:
    """Content blocks for a tool_result: one text block (the output trimmed, then ``writes_text``) and any images
    that fit."""
    parts: list[str] = []
    images: list[dict[str, Any]] = []
    for output in result.outputs:
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(output.get("text", ""))
        elif kind == "error":
            parts.append(_error_text(output))
        elif kind in ("execute_result", "display_data"):
            data = output.get("data", {})
            image_type = next((t for t in IMAGE_TYPES if t in data), None)
            if image_type:
                raw = data[image_type]
                size = len(base64.b64decode(raw, validate=False)) if isinstance(raw, str) else 0
                if 0 < size <= image_limit:
                    images.append({"type": "image", "source": {"type": "base64", "media_type": image_type,
                                                               "data": raw.replace("\n", "")}})
                    parts.append(f"[image {len(images)}: {image_type}, {size:,} bytes, attached]\n")
                else:
                    parts.append(f"[an image ({image_type}, {size:,} bytes) is over the {image_limit:,} byte "
                                 f"limit for the model; it is in {where}]\n")
            elif "text/plain" in data:
                parts.append(str(data["text/plain"]) + "\n")
    if result.status not in ("ok", "error"):
        reason = {"timeout": "it ran past the cell time limit and was interrupted",
                  "interrupted": "it was interrupted",
                  "killed": "the sandboxed kernel was killed; the next program runs in a fresh kernel "
                            "(every variable is gone)",
                  "kernel-died": "the sandboxed kernel died; the next program runs in a fresh kernel "
                                 "(every variable is gone)",
                  "memory": "it ran out of memory; the next program runs in a fresh kernel (every variable is gone)",
                  "rejected": "it was rejected before it ran"}.get(result.status, result.status)
        parts.append(f"[the cell ended with status {result.status!r}: {reason}]\n")
    if result.limits_hit:
        parts.append(f"[limits hit: {', '.join(result.limits_hit)}]\n")
    text = trim("".join(parts) or "(the program printed nothing)\n", budget, where)
    writes = writes_text(result, retry_hint)
    if writes:
        text = text + ("" if text.endswith("\n") else "\n") + "\n" + writes + "\n"
    return [{"type": "text", "text": text}, *images]
