"""A failed tool call reads like any Python error, as a frontend receives it from the real gVisor sandbox.

Each case runs one cell through a second Jupyter client on the session's frontend connection (as JupyterLab or
jupyter console would), and compares the IOPub ``error`` message's traceback, ANSI stripped and execution counts
normalized, with the reviewed text in snapshots/error_tracebacks/: the user's frames and the typed error, no stub,
runtime or concurrent.futures frame. ``help(tools.x)`` and ``tools.describe()`` are compared the same way.
``CELLGATE_UPDATE_SNAPSHOTS=1`` writes the files and fails; review the diff and rerun.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import NORTHWIND, SAMPLE_TOOLS, SNAPSHOTS
from jupyter_client import BlockingKernelClient
from snapshot_files import matches_snapshot

from cellgate.gate import SourceUnavailable
from cellgate.gate.testing import FakeToolSource

GOLDEN = SNAPSHOTS / "error_tracebacks"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
POLICY = """\
[policy]
default = "allow"

[policy.tools.fetch_invoice]
decision = "deny"

[policy.tools.issue_token]
max_calls_per_session = 0

[policy.tools.big]
rate = "1/hour"
"""


def lookup_customer(customer: str) -> dict[str, str]:
    """A tool whose source (an MCP server, say) is gone."""
    raise SourceUnavailable("the CRM server stopped")


@pytest.fixture(scope="module")
def frontend(session_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlockingKernelClient]:
    """A client of the module's one sandboxed session, on the connection file a frontend gets."""
    config = tmp_path_factory.mktemp("config") / "cellgate.toml"
    config.write_text(POLICY)
    box = session_factory(config=config, tools=[SAMPLE_TOOLS, NORTHWIND / "tools.py"], call_timeout=1.0,
                          sources=[FakeToolSource([lookup_customer])])
    client = BlockingKernelClient(connection_file=box.session.connection_file)
    client.load_connection_file()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    yield client
    client.stop_channels()


def run(client: BlockingKernelClient, code: str) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """The execute_reply's content, the IOPub error messages' contents and the stdout of one cell."""
    errors: list[dict[str, Any]] = []
    stdout: list[str] = []

    def output(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "error":
            errors.append(msg["content"])
        elif msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            stdout.append(msg["content"]["text"])

    reply = client.execute_interactive(code, timeout=120, output_hook=output)
    return reply["content"], errors, "".join(stdout)


def plain(traceback: list[str]) -> str:
    text = ANSI.sub("", "\n".join(traceback))
    return re.sub(r"\bIn\[\d+\]", "In[N]", text).rstrip() + "\n"


CASES = {
    # name: (cell, the error's class, the frames the user should see: one per line of "Cell In[N], line L")
    "failed": ("tools.explode('the ledger is locked')", "ToolError", [1]),
    "invalid": ("tools.add('two')", "ToolValidationError", [1]),
    "invalid_in_the_kernel": ("tools.echo(object())", "ToolValidationError", [1]),
    "not_found": ("from cellgate.kernel import runtime\nruntime.call('no_such_tool', {})", "ToolNotFound", [2]),
    "denied": ("tools.fetch_invoice('inv-1', api_key='k')", "ToolDenied", [1]),
    "budget": ("tools.issue_token('ada')", "ToolBudgetExceeded", [1]),
    "rate_limited": ("first = tools.big(1)\nsecond = tools.big(1)", "ToolRateLimited", [2]),
    "timeout": ("tools.slow(5)", "ToolTimeout", [1]),
    "unavailable": ("tools.lookup_customer('ada')", "ToolUnavailable", [1]),
    "awaited": ("import asyncio\nawait asyncio.gather(tools.aio.echo('a'), tools.aio.add('two'))",
                "ToolValidationError", [2]),
    "in_user_functions": (("def total(orders):\n    return tools.add(orders)\n\n"
                           "def report():\n    return total('x')\n\nreport()"), "ToolValidationError", [7, 5, 2]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failed_call_shows_the_users_frames_and_the_typed_error(frontend: BlockingKernelClient, name: str) -> None:
    code, ename, lines = CASES[name]
    reply, errors, _ = run(frontend, code)
    assert reply["status"] == "error" and len(errors) == 1, errors
    (error,) = errors
    assert (error["ename"], reply["ename"]) == (ename, ename)
    assert reply["evalue"] == error["evalue"] and reply["traceback"] == error["traceback"]
    text = plain(error["traceback"])
    frames = re.findall(r"^(?:Cell In\[N\], line (\d+)(?:, in .*)?|File .*)$", text, re.MULTILINE)
    assert frames == [str(line) for line in lines], text  # the user's frames only: no `File ...` of a stub or runtime
    assert "skipping hidden" not in text and text.endswith(f"\n{ename}: {error['evalue']}\n"), text
    matches_snapshot(GOLDEN / f"{name}.txt", text, name)


def test_a_chained_error_keeps_the_users_frames_of_both(frontend: BlockingKernelClient) -> None:
    code = ("try:\n    tools.explode('no ink')\nexcept tools.ToolError as error:\n"
            "    raise RuntimeError('the report could not be printed') from error")
    reply, (error,), _ = run(frontend, code)
    assert (reply["ename"], error["ename"]) == ("RuntimeError", "RuntimeError")
    text = plain(error["traceback"])
    frames = re.findall(r"^(?:Cell In\[N\], line \d+(?:, in .*)?|File .*)$", text, re.MULTILINE)
    assert len(frames) == 2 and all(frame.startswith("Cell In[N]") for frame in frames), text
    assert "ToolError: tool 'explode' failed: ValueError: no ink\n" in text
    matches_snapshot(GOLDEN / "chained.txt", text, "chained")


def test_the_full_traceback_stays_for_the_debugger(frontend: BlockingKernelClient) -> None:
    """Only what people read is trimmed: the interpreter's traceback still reaches the stub (``%debug``)."""
    code = ("import sys\ntry:\n    tools.add('two')\nexcept tools.ToolError:\n    tb = sys.exc_info()[2]\n"
            "names = []\nwhile tb:\n    names.append(tb.tb_frame.f_code.co_name)\n    tb = tb.tb_next\n"
            "print(names[-3:])")
    reply, _, stdout = run(frontend, code)
    assert reply["status"] == "ok" and stdout == "['add', 'call', 'call']\n"


@pytest.mark.parametrize(("name", "code"), [("help_create_task", "help(tools.create_task)"),
                                            ("describe_create_task", "print(tools.describe('create_task'))")])
def test_help_and_describe_read_like_python(frontend: BlockingKernelClient, name: str, code: str) -> None:
    reply, _, stdout = run(frontend, code)
    assert reply["status"] == "ok"
    assert "_t." not in stdout and "\\n" not in stdout
    assert "kind: Literal['follow_up', 'refund', 'escalate']" in stdout
    matches_snapshot(GOLDEN / f"{name}.txt", stdout, name)
