"""Tools from MCP servers (real server processes, stdio and streamable HTTP) called from code in the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, cellgate, serve_on_a_free_port

from cellgate.extensions.mcp.names import python_names
from cellgate.gate import ConfigError
from cellgate.gate.audit.journal import read_journal
from cellgate.gate.audit.recorder import journal_path
from cellgate.gate.testing import BlockingSession

CRM = ROOT / "tests" / "mcp_servers" / "crm_server.py"
TOKEN = "crm-token-7f3a9c"
POLICY = """
[policy]
default = "deny"
[policy.tools."crm.create_task"]
decision = "allow"
[policy.tools."crm.fail"]
decision = "allow"
[policy.tools."crm.crash"]
decision = "allow"
[policy.tools."crm.token_seen"]
decision = "allow"
[policy.tools."crm.authorized"]
decision = "allow"
"""


def stdio_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "cellgate.toml"
    config.write_text(f"""
[mcp.servers.crm]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(CRM))}]
env = {{ CRM_LOG = {json.dumps(str(tmp_path / "crm.log"))}, CRM_TOKEN = "{TOKEN}" }}
{extra}
{POLICY}""")
    return config


def crm_log(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "crm.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def open_session(tmp_path: Path, config: Path) -> BlockingSession:
    return BlockingSession(config=config, notebook=tmp_path / "run.ipynb", cwd=tmp_path)


def test_mcp_tools_are_typed_gated_and_recorded(tmp_path: Path, runsc: object) -> None:
    with open_session(tmp_path, stdio_config(tmp_path)) as box:
        typed = box.execute("c = tools.crm.lookup_customer('ana@acme.example')\n"
                            "print(c['name'], tools.crm.lookup_customer.__annotations__['return'].__name__,\n"
                            "      sorted(tools.crm.LookupCustomerResult.__required_keys__))")
        assert typed.stdout == "Ana Silva LookupCustomerResult ['customer_id', 'name', 'tier']\n"
        assert typed.calls[0].decision == "allow" and typed.calls[0].result["tier"] == "gold"
        # "create-task" on the server is tools.crm.create_task in the sandbox.
        created = box.execute("print(tools.crm.create_task(c['customer_id'], 'call back')['task_id'])")
        assert created.stdout == "7\n"
        failed = box.execute("tools.crm.fail('no refunds today')")
        assert failed.error["ename"] == "ToolError" and "the CRM refused: no refunds today" in failed.error["evalue"]
        destructive = box.execute("tools.crm.delete_customer('cus-0042')")
        assert destructive.error["ename"] == "ToolDenied"
        assert "the policy required approval" in destructive.error["evalue"]  # destructiveHint -> approve; no approver -> denied
        token = f"{TOKEN[:6]!r} + {TOKEN[6:]!r}"  # split, so the notebook's copy of the source does not hold it
        secret = box.execute("import os, pathlib\n"
                             f"print(tools.crm.token_seen()['result'], {token} in repr(dict(os.environ)),\n"
                             f"      {token} in pathlib.Path('/proc/self/environ').read_text())")
        assert secret.stdout == "yes False False\n"  # the server has its credential; the sandbox never sees it
        notebook = box.session.notebook_path
    assert [e["event"] for e in crm_log(tmp_path)] == ["started", "lookup_customer", "create-task"]
    nb = nbformat.read(notebook, as_version=4)
    calls = [call for cell in nb.cells for call in cell.metadata.cellgate.calls]
    assert [(c["tool"], c["decision"], c["ok"]) for c in calls] == [
        ("crm.lookup_customer", "allow", True), ("crm.create_task", "allow", True), ("crm.fail", "allow", False),
        ("crm.delete_customer", "approval-denied", False), ("crm.token_seen", "allow", True)]
    assert any(source.startswith("mcp:crm (stdio)") for source in nb.metadata.cellgate.tools["sources"])
    assert TOKEN not in notebook.read_text()


def test_a_dying_server_is_restarted_once_then_its_tools_are_unavailable(tmp_path: Path, runsc: object) -> None:
    with open_session(tmp_path, stdio_config(tmp_path)) as box:
        first = box.execute("tools.crm.crash()")
        assert first.error["ename"] == "ToolUnavailable"
        assert "stopped during this call" in first.error["evalue"] and "restarted it" in first.error["evalue"]
        again = box.execute("print(tools.crm.lookup_customer('ana@acme.example')['name'])")
        assert again.stdout == "Ana Silva\n"  # the restarted server answers
        pids = {e["pid"] for e in crm_log(tmp_path) if e["event"] == "started"}
        assert len(pids) == 2  # the session's server and its restart
        second = box.execute("tools.crm.crash()")
        assert "stopped again after its restart" in second.error["evalue"]
        after = box.execute("tools.crm.lookup_customer('ana@acme.example')")
        assert after.error["ename"] == "ToolUnavailable" and "unavailable for the rest of this session" in after.error["evalue"]
        assert box.execute("print('the kernel is fine')").stdout == "the kernel is fine\n"
        journal = journal_path(box.session.notebook_path)
    events = [r["event"] for r in read_journal(journal).records]
    assert events.count("mcp-server-restarted") == 1 and events.count("mcp-server-died") == 1


@pytest.fixture()
def http_crm(tmp_path: Path) -> Iterator[str]:
    env = {**os.environ, "CRM_LOG": str(tmp_path / "crm.log"), "CRM_EXPECTED_AUTH": f"Bearer {TOKEN}"}
    log_path = tmp_path / "crm-server.log"
    log = log_path.open("w")

    def start(port: int) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(CRM), "--http", str(port)], env=env, stdout=log,
                                stderr=subprocess.STDOUT, text=True)

    port, process = serve_on_a_free_port(start, log_path, "the HTTP MCP server", seconds=30)
    yield f"http://127.0.0.1:{port}/mcp"
    process.terminate()
    process.wait(10)
    log.close()


def test_a_streamable_http_server_with_configured_headers(tmp_path: Path, http_crm: str, runsc: object) -> None:
    config = tmp_path / "cellgate.toml"
    config.write_text(f"""
[mcp.servers.crm]
url = "{http_crm}"
headers = {{ Authorization = "Bearer {TOKEN}" }}
{POLICY}""")
    with open_session(tmp_path, config) as box:
        result = box.execute("print(tools.crm.authorized()['result'], tools.crm.lookup_customer('ana@acme.example')['tier'])")
        assert result.stdout == "yes gold\n", result.text
        assert [c.tool for c in result.calls] == ["crm.authorized", "crm.lookup_customer"]


def test_policy_check_shows_the_defaults_from_annotations(tmp_path: Path) -> None:
    done = cellgate("policy", "check", str(stdio_config(tmp_path)), timeout=120, env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in done.stdout.splitlines()
            if line.startswith("│")}
    assert rows["crm.lookup_customer"] == "allow (the tool's default)"  # readOnlyHint
    assert rows["crm.delete_customer"] == "approve (the tool's default)"  # destructiveHint
    assert rows["crm.create_task"] == "allow" and rows["crm.authorized"] == "allow"


def test_a_server_that_cannot_start_is_a_clear_error_unless_optional(tmp_path: Path, runsc: object) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text('[mcp.servers.crm]\ncommand = "/nonexistent/crm-server"\n')
    with pytest.raises(ConfigError, match=r"MCP server 'crm' \(stdio: /nonexistent/crm-server\) failed to start"):
        BlockingSession(config=broken, notebook=tmp_path / "a.ipynb", cwd=tmp_path).start()
    broken.write_text('[mcp.servers.crm]\ncommand = "/nonexistent/crm-server"\noptional = true\n')
    with BlockingSession(config=broken, notebook=tmp_path / "b.ipynb", cwd=tmp_path) as box:
        assert box.execute("print(hasattr(tools, 'crm'))").stdout == "False\n"
        journal = journal_path(box.session.notebook_path)
    notes = [r for r in read_journal(journal).records if r["event"] == "tool-source-note"]
    assert notes and notes[0]["server"] == "crm" and "failed to start" in notes[0]["detail"]


def test_mcp_tool_names_become_identifiers_deterministically() -> None:
    names = python_names(["create-task", "create_task", "2fa.check", "class", "search", "aio", "Ünïcode"])
    assert names == {"2fa.check": "t_2fa_check", "aio": "aio_", "class": "class_", "create-task": "create_task",
                     "create_task": "create_task_2", "search": "search_", "Ünïcode": "n_code"}
    assert python_names(list(reversed(list(names)))) == names
