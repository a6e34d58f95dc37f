"""The in-process MCP server: execute_python on a cellgate session."""

from __future__ import annotations

from typing import Any

from claude_agent_sdk import McpSdkServerConfig, SdkMcpTool, create_sdk_mcp_server, tool

from cellgate.gate import CellResult, Session, SessionError
from cellgate.gate.ext import stub_signature

TOOL_NAME = "execute_python"
MAX_TEXT_CHARS = 100_000  # what one answer gives the model of a cell's text; the audit notebook keeps it all
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
SCHEMA = {"type": "object", "properties": {
    "code": {"type": "string", "description": "The Python code to run."},
    "retry": {"type": "boolean", "default": False, "description": (
        "true: this cell retries the last failed cell: writes it already made are answered from the record, not "
        "repeated; false runs everything again")}},
    "required": ["code"], "additionalProperties": False}
# How Claude retries, as the writes summary of a failed cell tells it (``Writes.summary``).
RETRY_HINT = "call execute_python again with retry: true"


def describe(session: Session) -> str:
    """The tool's description: what it does and the session's tools as the code calls them."""
    listing = "\n".join(
        f"- tools.{entry['name']}{stub_signature(entry, shown=True)}: "
        f"{(str(entry.get('description') or '').strip().splitlines() or [''])[0]}"
        for entry in session.manifest)
    return ("Run Python in a sandboxed Jupyter kernel (variables persist between calls) and get back what it "
            "printed and displayed. Host tools are functions of the `tools` module there (no import needed); "
            "each call is checked by policy and recorded"
            + (f":\n{listing}" if listing else ".")
            + "\nWhen code fails after some of its writes, the answer lists the writes already done: send the fixed "
              "code with retry: true so they are answered from the record instead of made twice.")


def writes_text(result: CellResult) -> str:
    """What the cell's writes did: for a cell that did not end ok (what is done, and how to retry without repeating
    it), or one with writes answered from the record or of unknown outcome; empty otherwise."""
    writes = result.writes
    if result.ok and not (writes.answered or writes.unknown):
        return ""
    return writes.summary(failed_cell=not result.ok, retry_hint=RETRY_HINT)


def content(result: CellResult) -> dict[str, Any]:
    """The MCP answer for a cell: its text (cut, saying so, past MAX_TEXT_CHARS), then what its writes did
    (``writes_text``, never cut), its images, whether it failed."""
    text = result.text
    if not result.ok and result.error and str(result.error.get("ename")) not in text:
        text += f"{result.error.get('ename')}: {result.error.get('evalue')}\n"
    if result.status not in ("ok", "error"):
        text += f"(the cell ended with status {result.status!r}: {', '.join(result.limits_hit) or 'no limit named'})\n"
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"\n(cut: {len(text) - MAX_TEXT_CHARS} more characters; print less)\n"
    writes = writes_text(result)
    if writes:
        text += ("" if not text or text.endswith("\n") else "\n") + ("\n" if text else "") + writes + "\n"
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text or "(the code printed nothing)"}]
    for output in result.outputs:
        data = output.get("data") or {}
        for kind in IMAGE_TYPES:
            if isinstance(data.get(kind), str):
                blocks.append({"type": "image", "data": data[kind].replace("\n", ""), "mimeType": kind})
                break
    return {"content": blocks, "is_error": not result.ok}


def refused(text: str) -> dict[str, Any]:
    """An error answer for a call that ran nothing."""
    return {"content": [{"type": "text", "text": text}], "is_error": True}


def execute_python_tool(session: Session, *, timeout: float | None = None) -> SdkMcpTool[Any]:
    """The ``execute_python`` tool on ``session`` (started, on the event loop the SDK's query runs on)."""

    @tool(TOOL_NAME, describe(session), SCHEMA)
    async def execute_python(args: dict[str, Any]) -> dict[str, Any]:
        code, retry = args.get("code"), args.get("retry", False)
        if not isinstance(code, str):
            return refused(f"execute_python takes code as a string, not {type(code).__name__}")
        if not isinstance(retry, bool):
            return refused(f"execute_python's retry is true or false, not {type(retry).__name__}; leave it out to "
                           "run the code as a new cell")
        try:
            return content(await session.execute(code, timeout=timeout, retry=retry))
        except SessionError as exc:
            if not retry:
                raise
            return refused(f"execute_python with retry: true was refused, nothing ran: {exc}")

    return execute_python


def cellgate_mcp_server(session: Session, *, name: str = "cellgate", timeout: float | None = None
                        ) -> McpSdkServerConfig:
    """An in-process MCP server for ``ClaudeAgentOptions(mcp_servers={name: ...})``: its tool is
    ``mcp__{name}__execute_python`` to Claude (name it in ``allowed_tools``)."""
    return create_sdk_mcp_server(name=name, tools=[execute_python_tool(session, timeout=timeout)])
