"""What `cellgate mcp serve`'s file tools refuse before any session (and so any sandbox) is started: an upload over
``[sandbox] file_limit_mb``, content that is not base64, and over HTTP a download without a session handle (a new
session holds no file). The moves themselves, on real sandboxes: tests/sandbox/test_mcp_files.py."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest
from mcp import Client

from cellgate.extensions.mcp.file_tools import FileMoved
from cellgate.extensions.mcp.serve import build_server
from cellgate.gate import load_settings

pytestmark = pytest.mark.unit


def test_refusals_that_need_no_session_start_none(tmp_path: Path) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text("[sandbox]\nfile_limit_mb = 1\n")
    # No session may start: the opener is the real one, so a start would need runsc and a minute, not a refusal.
    server = build_server(load_settings(config), {}, single_client=False)

    async def calls() -> list[str]:
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["download_file"].output_schema == FileMoved.model_json_schema()
            said = []
            for name, args in [
                ("upload_file", {"path": "big.bin", "encoding": "base64",
                                 "content": base64.b64encode(b"\0" * ((1 << 20) + 1)).decode()}),
                ("upload_file", {"path": "a.bin", "encoding": "base64", "content": "not base64!"}),
                ("download_file", {"path": "totals.csv"}),
            ]:
                result = await client.call_tool(name, args)
                assert result.is_error, (name, result)
                said.append(result.content[0].text)
            return said

    big, bad, no_session = asyncio.run(asyncio.wait_for(calls(), 60))
    assert "1,048,577 bytes, over the limit of 1,048,576 bytes ([sandbox] file_limit_mb = 1)" in big
    assert "not valid base64" in bad
    assert "download_file needs `session`" in no_session
