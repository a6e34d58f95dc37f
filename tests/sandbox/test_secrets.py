"""Secrets stay on the host: secret arguments and results are digests in the record,
and tool errors that reach the sandbox carry no credential, header or host path."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import SAMPLE_TOOLS

KEY = "sk-live-0123456789abcdef"


@pytest.fixture(scope="module")
def secretive(session_factory, tmp_path_factory):
    folder = tmp_path_factory.mktemp("secrets")
    (folder / "cellgate.toml").write_text(
        f'[tools]\nmodules = ["{SAMPLE_TOOLS}"]\n\n[policy]\ndefault = "allow"\n\n'
        '[policy.tools.fetch_invoice]\nsecrets = ["api_key"]\n')
    return session_factory(config=folder / "cellgate.toml", tools=[])


def audit_text(box) -> str:
    path: Path = box.session.notebook_path
    return path.read_text() + path.with_name(path.stem + ".journal.jsonl").read_text()


def test_secret_arguments_are_kept_as_digests(secretive) -> None:
    result = secretive.execute(f"print(tools.fetch_invoice('inv-1', {KEY!r}))")
    assert result.stdout == "{'invoice_id': 'inv-1', 'total': 42}\n"
    call = result.calls[0]
    digest = call.args["api_key"]
    assert digest["redacted"] is True and digest["secret"] == "fetch_invoice argument api_key"
    # Keyed with the host key: a plain sha256 would let anyone confirm a guessed key.
    assert len(digest["hmac_sha256"]) == 64 and digest["hmac_sha256"] != hashlib.sha256(KEY.encode()).hexdigest()
    assert "sha256" not in digest
    assert call.args["invoice_id"] == "inv-1"
    assert call.source_line == "print(tools.fetch_invoice('inv-1', '[secret: fetch_invoice argument api_key]'))"
    # The program text holds the key (this test wrote it there); the call records do not.
    notebook = json.loads(secretive.session.notebook_path.read_text())
    assert KEY not in json.dumps(notebook["cells"][-1]["metadata"])
    journal = secretive.session.notebook_path.with_name(secretive.session.notebook_path.stem + ".journal.jsonl")
    calls = [line for line in journal.read_text().splitlines() if json.loads(line)["event"].startswith("call-")]
    assert calls and not any(KEY in line for line in calls)


def test_tool_errors_are_redacted_before_reaching_the_sandbox(secretive) -> None:
    result = secretive.execute(f"tools.fetch_invoice('broken', {KEY!r})")
    assert result.status == "error" and result.error["ename"] == "ToolError"
    message = result.error["evalue"]
    assert KEY not in message and "/home/operator" not in message and "Bearer" not in message
    assert "PermissionError" in message and "401" in message
    assert KEY not in str(result.calls[0].error)


def test_values_a_tool_marks_secret_reach_the_cell_but_not_the_record(secretive) -> None:
    result = secretive.execute("token = tools.issue_token('ada')['token']\nprint(token.startswith('tok-ada'))")
    assert result.stdout == "True\n"
    recorded = result.calls[0].result
    assert recorded["user"] == "ada" and recorded["token"]["redacted"] is True
    assert "s3cr3t-value" not in audit_text(secretive)
