"""``upload_file`` and ``download_file`` of ``cellgate mcp serve`` (issue 32, item 5), from the official MCP client
over stdio: a file in, a program that reads it and writes another, that file out; each recorded by sha256 in the
session's audit notebook; bad input is a tool error that loses nothing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import CELLGATE
from mcp import Client
from mcp.client.stdio import StdioServerParameters

pytestmark = pytest.mark.gvisor


def test_a_file_goes_in_a_program_reads_it_and_its_result_comes_out(tmp_path: Path, runsc: object) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text(f'[audit]\ndir = {json.dumps(str(tmp_path / "runs"))}\n[sandbox]\nfile_limit_mb = 1\n')
    server = StdioServerParameters(command=CELLGATE[0], args=[*CELLGATE[1:], "mcp", "serve", "--config", str(config)],
                                   env={**os.environ}, cwd=str(tmp_path))
    csv = "region,amount\n" + "".join(f"r{i % 3},{i}\n" for i in range(3000))
    binary = bytes(range(256)) * 4

    async def scenario() -> None:
        async with Client(server) as client:
            sent = await client.call_tool("upload_file", {"path": "orders.csv", "content": csv})
            assert sent.is_error is False, sent
            handle = sent.structured_content["session"]
            assert sent.structured_content["path"] == "/workspace/orders.csv"
            assert sent.structured_content["sha256"] == hashlib.sha256(csv.encode()).hexdigest()
            raw = await client.call_tool("upload_file", {"path": "/tmp/raw.bin", "encoding": "base64",
                                                         "content": base64.b64encode(binary).decode(),
                                                         "session": handle})
            assert raw.structured_content["size"] == 1024

            ran = await client.call_tool("execute_python", {"session": handle, "code": (
                "import csv, collections\nt = collections.Counter()\n"
                "for row in csv.DictReader(open('orders.csv')):\n    t[row['region']] += int(row['amount'])\n"
                "open('totals.csv', 'w').write(''.join(f'{k},{v}\\n' for k, v in sorted(t.items())))\n"
                "print(len(open('/tmp/raw.bin', 'rb').read()))")})
            assert ran.structured_content["stdout"] == "1024\n", ran.structured_content

            got = await client.call_tool("download_file", {"path": "totals.csv", "session": handle})
            expected = "".join(f"r{k},{sum(range(k, 3000, 3))}\n" for k in range(3))
            assert got.structured_content["text"] == expected and got.structured_content["text_cut"] is False
            assert base64.b64decode(got.content[0].resource.blob) == expected.encode()
            assert got.structured_content["sha256"] == hashlib.sha256(expected.encode()).hexdigest()
            back = await client.call_tool("download_file", {"path": "/tmp/raw.bin", "session": handle})
            assert back.structured_content["text"] is None and base64.b64decode(back.content[0].resource.blob) == binary

            # Refused, each as a tool error naming the cause; the session goes on.
            too_big = await client.call_tool("upload_file", {"path": "big.txt", "content": "x" * (2 << 20),
                                                             "session": handle})
            assert too_big.is_error and "file_limit_mb = 1" in too_big.content[0].text
            outside = await client.call_tool("upload_file", {"path": "/etc/x", "content": "x", "session": handle})
            assert outside.is_error and "/etc/x" in outside.content[0].text
            bad = await client.call_tool("upload_file", {"path": "a", "content": "%%%", "encoding": "base64",
                                                         "session": handle})
            assert bad.is_error and "not valid base64" in bad.content[0].text
            missing = await client.call_tool("download_file", {"path": "absent.csv", "session": handle})
            assert missing.is_error and "absent.csv" in missing.content[0].text
            assert f"(session {handle})" in missing.content[0].text
            listed = await client.call_tool("execute_python", {"session": handle, "code": (
                "import os\nprint(sorted(os.listdir('.')))")})
            assert listed.structured_content["stdout"] == "['orders.csv', 'totals.csv']\n"  # nothing half-written

            journal = next((tmp_path / "runs").glob("*.journal.jsonl"))
            moved = [json.loads(line) for line in journal.read_text().splitlines()]
            moved = [(r["event"], r["path"], r["sha256"]) for r in moved if r["event"].startswith("file-")]
            assert moved == [("file-uploaded", "orders.csv", sent.structured_content["sha256"]),
                             ("file-uploaded", "/tmp/raw.bin", raw.structured_content["sha256"]),
                             ("file-downloaded", "totals.csv", got.structured_content["sha256"]),
                             ("file-downloaded", "/tmp/raw.bin", back.structured_content["sha256"])]

    asyncio.run(asyncio.wait_for(scenario(), 240))
