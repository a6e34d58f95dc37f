"""``upload_file`` and ``download_file`` of ``cellgate mcp serve``: files into and out of a client's session.

They are the session's ``upload`` and ``download`` (issue 32, item 5): each file is bounded by ``[sandbox]
file_limit_mb``, confined to the sandbox's workspace and temporary folder, recorded by sha256 with its bytes kept
as a blob of the record (``cellgate replay`` puts uploads back), and reaches only the session of the principal
that owns it (``Sessions.admit``, as for ``execute_python``). JSON carries text, so bytes that are not UTF-8 go as
base64, both ways. Claude Code hands its model the ``structuredContent`` alone: a downloaded text is in it too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
from typing import Annotated, Literal
from urllib.parse import quote

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import BlobResourceContents, CallToolResult, EmbeddedResource, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from cellgate.gate import CellgateError

from .auth import current_principal
from .sessions import Sessions

TEXT_IN_RESULT = 200_000  # characters of a downloaded text also put in the structured result (the blob has it all)


class FileMoved(BaseModel):
    """The structuredContent of upload_file and download_file."""

    session: str = Field(description="the handle to pass back as `session` to keep using this session")
    path: str = Field(description="the file's path in the sandbox (upload: its real path, as the sandbox resolved it)")
    size: int = Field(description="its size in bytes")
    sha256: str = Field(description="the SHA-256 of its bytes, as the audit notebook records it")
    text: str | None = Field(default=None, description="download_file: the file's text when it is UTF-8 (cut past "
                                                       f"{TEXT_IN_RESULT:,} characters; the attached resource is whole)")
    text_cut: bool = Field(default=False, description="download_file: true when `text` holds only the start")


def decoded(content: str, encoding: str) -> bytes:
    if encoding == "utf-8":
        return content.encode("utf-8")
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError("content is not valid base64; send the file's bytes base64-encoded, or text with "
                        "encoding='utf-8'") from None


def register(server: MCPServer, sessions: Sessions, file_limit: int) -> None:
    """Add the two file tools to ``server``, over the sessions of ``sessions`` (``file_limit``: ``[sandbox]
    file_limit_mb`` in bytes, checked before a session is started for a file that could never go in)."""

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False))
    async def upload_file(path: str, content: str, encoding: Literal["utf-8", "base64"] = "utf-8",
                          session: str | None = None) -> Annotated[CallToolResult, FileMoved]:
        """Write a file into the sandbox (whole or not at all), for the session's programs to read.

        Args:
            path: Where, in the sandbox's working folder (relative) or under /workspace or /tmp.
            content: The file's text, or its bytes base64-encoded (encoding='base64').
            encoding: 'utf-8' (text) or 'base64' (any bytes).
            session: The handle a previous call returned; omit it to start a session.
        """
        data = decoded(content, encoding)
        if len(data) > file_limit:
            raise ToolError(f"the file for {path[:200]!r} is {len(data):,} bytes, over the limit of {file_limit:,} "
                            f"bytes ([sandbox] file_limit_mb = {file_limit >> 20}); nothing was written. Split the "
                            "file (or compress it), or ask the operator to raise file_limit_mb")
        handle, entry = await sessions.admit(session, current_principal())
        async with entry.lock:
            try:
                record = await entry.session.upload(path, data)
            except CellgateError as exc:  # outside the workspace, the sandbox refused it
                raise ToolError(f"{exc} (session {handle})") from None  # a session this call started stays usable
        moved = FileMoved(session=handle, path=record.path, size=record.size, sha256=record.sha256)
        return CallToolResult(content=[TextContent(text=f"wrote {record.path} ({record.size:,} bytes, sha256 "
                                                        f"{record.sha256})")],
                              structured_content=moved.model_dump(mode="json"))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def download_file(path: str, session: str | None = None) -> Annotated[CallToolResult, FileMoved]:
        """Read a file a program wrote in the sandbox; returned as an embedded resource (and as text if UTF-8).

        Args:
            path: The file, in the sandbox's working folder (relative) or under /workspace or /tmp.
            session: The handle a previous call returned (over stdio it may be omitted: the client's one session).
        """
        if session is None and not sessions.single_client:  # a new session holds no file to download
            raise ToolError("download_file needs `session`: the handle execute_python or upload_file returned")
        handle, entry = await sessions.admit(session, current_principal())
        async with entry.lock:
            try:
                data = await entry.session.download(path)
            except CellgateError as exc:  # missing, too large, outside the workspace
                raise ToolError(f"{exc} (session {handle})") from None
        digest = hashlib.sha256(data).hexdigest()  # as the session recorded it
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        cut = text is not None and len(text) > TEXT_IN_RESULT
        mime = mimetypes.guess_type(path)[0] or ("text/plain" if text is not None else "application/octet-stream")
        blob = BlobResourceContents(uri=f"cellgate://sessions/{handle}/files/{quote(path.lstrip('/'))}",
                                    mimeType=mime, blob=base64.b64encode(data).decode("ascii"))
        moved = FileMoved(session=handle, path=path, size=len(data), sha256=digest,
                          text=text[:TEXT_IN_RESULT] if text is not None else None, text_cut=cut)
        return CallToolResult(content=[EmbeddedResource(resource=blob)], structured_content=moved.model_dump(mode="json"))
