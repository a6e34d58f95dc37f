"""Tool calls from the kernel through the gate: results, typed errors, hostile requests.

The kernel tier: the kernel runs as a local subprocess (``isolation = "none"``); every claim here is about the gate,
which sees the same requests whatever isolates the kernel."""

from __future__ import annotations

import json
import time

import pytest


def journal(box, since: int = 0) -> list[dict]:
    """The session's journal records from index ``since`` on (the module shares one session: a test reads its own)."""
    path = box.session.notebook_path.with_name(box.session.notebook_path.stem + ".journal.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()][since:]


def test_call_returns_result_and_is_recorded(box) -> None:
    result = box.execute("print(tools.add(2, b=40), tools.echo('hi'))")
    assert result.ok and result.stdout == "42 hi\n"
    assert [(c.tool, c.args, c.ok, c.result) for c in result.calls] == [
        ("add", {"a": 2, "b": 40}, True, 42), ("echo", {"text": "hi"}, True, "hi")]


def test_stubs_have_real_signatures_and_docs(box) -> None:
    result = box.execute(
        "import inspect\nprint(inspect.signature(tools.add))\nprint(tools.add.__doc__.splitlines()[0])\n"
        "print(tools.search('integers'))\nprint(tools.describe('echo').splitlines()[0])")
    assert result.stdout.splitlines() == [
        "(a: int, b: int = 1) -> int", "Add two integers.", "['add: Add two integers.']", "echo(text: str)"]


@pytest.mark.parametrize(
    ("code", "exception", "base", "fragment"),
    [
        ("from cellgate.kernel import runtime\nruntime.call('no_such_tool', {})", "ToolNotFound", "LookupError",
         "no tool named 'no_such_tool'"),
        ("tools.add('two')", "ToolValidationError", "ValueError", "argument a: 'two' is not of type 'integer'"),
        ("tools.explode('the ledger is locked')", "ToolError", "Exception", "ValueError: the ledger is locked"),
        ("tools.slow(10)", "ToolTimeout", "TimeoutError", "did not finish within 2 s"),
    ],
)
def test_typed_errors_in_the_cell_and_kernel_keeps_working(box, code, exception, base, fragment) -> None:
    check = f'''
try:
{chr(10).join("    " + line for line in code.splitlines())}
except tools.{exception} as e:
    print(type(e).__name__, isinstance(e, {base}), e.kind, e.tool)
    print(e)
'''
    result = box.execute(check)
    assert result.ok, result.text
    first, message = result.stdout.splitlines()[:2]
    name, is_base, kind, _ = first.split(" ", 3)
    assert (name, is_base) == (exception, "True")
    assert fragment in message
    assert result.calls[0].ok is False and result.calls[0].error["kind"] == kind
    assert box.execute("print('alive')").stdout == "alive\n"


def test_uncaught_tool_error_fails_the_cell_with_a_clear_message(box) -> None:
    result = box.execute("tools.add(1, b='x')")
    assert result.status == "error"
    assert result.error == {"ename": "ToolValidationError", "evalue": "tool 'add': argument b: 'x' is not of type 'integer'"}


def test_invalid_arguments_never_reach_the_tool(box) -> None:
    # The counter lives in the tool module the host gate loaded.
    counts = box.session.provisioner.registry.get("add").function.__globals__["CALLS"]
    start = counts.get("add", 0)
    box.execute("for bad in ['x', None, 1.5, [1]]:\n    try:\n        tools.add(bad)\n    except tools.ToolValidationError:\n        pass")
    assert counts.get("add", 0) == start
    box.execute("tools.add(5)")
    assert counts.get("add", 0) == start + 1


def test_large_results_are_stored_by_digest(box) -> None:
    result = box.execute("print(len(tools.big(64)))")
    assert result.stdout == "65536\n"
    cell = json.loads(box.session.notebook_path.read_text())["cells"][-1]
    call = cell["metadata"]["cellgate"]["calls"][0]
    assert call["result_bytes"] == 65536 + 2 and len(call["result_sha256"]) == 64
    assert "result" not in call and call["result_preview"].startswith('"xxx')


def test_hostile_requests_get_error_replies_and_journal_entries(box) -> None:
    since = len(journal(box))
    code = '''
from cellgate.kernel import runtime
client = runtime.client()
comm = client._open_comm()
import uuid
def raw(data):
    call_id = data.get("id") if isinstance(data, dict) else None
    fut = None
    if isinstance(call_id, str):
        from concurrent.futures import Future
        fut = Future()
        client._pending[call_id] = ("raw", fut)
    comm.send(data)
    if fut is None:
        return "sent"
    try:
        return "ok|" + fut.result(timeout=10)
    except Exception as e:
        return type(e).__name__ + "|" + str(e)[:80]
results = [
    raw({"op": "exec", "id": uuid.uuid4().hex, "tool": "echo", "args": {}}),
    raw({"op": "call", "id": uuid.uuid4().hex, "tool": "echo", "args": ["not", "a", "dict"]}),
    raw({"op": "call", "id": uuid.uuid4().hex, "tool": "echo; rm -rf /", "args": {}}),
    raw({"op": "call", "id": uuid.uuid4().hex, "tool": "echo", "args": {}, "extra": 1}),
    raw({"op": "call", "id": "not-hex!", "tool": "echo", "args": {}}),
    raw("just a string"),
    raw({"op": "call", "args": {"text": "x" * (2 << 20)}}),
    raw({"op": "call", "id": uuid.uuid4().hex, "tool": "echo", "args": {"text": "still fine"},
         "cell": runtime._cell_id()}),
]
for r in results:
    print(r)
'''
    result = box.execute(code)
    assert result.ok, result.text
    lines = result.stdout.splitlines()
    for line in lines[:5]:
        assert line.startswith("ToolValidationError|malformed tool call: "), line
    assert lines[5:7] == ["sent", "sent"]  # no id to answer: journal only
    assert lines[7] == "ok|still fine"
    rejected = [e for e in journal(box, since) if e["event"] == "call-rejected"]
    assert len(rejected) == 7, rejected  # the five answered and the two that had no id to answer
    assert any("limit 1048576 bytes" in e["reason"] for e in rejected)
    oversize = box.execute("try:\n    tools.echo('x' * (2 << 20))\nexcept tools.ToolValidationError as e:\n    print(e)")
    assert "over the 1048576 byte limit per call" in oversize.stdout
    assert box.execute("print(tools.echo('after'))").stdout == "after\n"


def test_async_calls_of_one_loop_turn_leave_as_batches(box) -> None:
    result = box.execute('''
import asyncio
from cellgate.kernel import runtime
comm = runtime.client()._open_comm()
sent, send = [], comm.send
comm.send = lambda data, **kw: (sent.append(data["op"]), send(data, **kw))[1]
results = await asyncio.gather(*(tools.aio.echo(str(i)) for i in range(129)))
comm.send = send
print(results == [str(i) for i in range(129)], sent)
''')
    assert result.stdout == "True ['batch', 'batch', 'call']\n", result.text
    assert [c.args["text"] for c in result.calls] == [str(i) for i in range(129)]  # each decided and recorded


def test_a_hostile_batch_is_refused_whole_or_answered_call_by_call(box) -> None:
    since = len(journal(box))
    result = box.execute('''
import uuid
from concurrent.futures import Future
from cellgate.kernel import runtime
client = runtime.client()
comm = client._open_comm()
def expect(call_id):
    fut = Future()
    client._pending[call_id] = ("raw", fut)
    return fut
good, bad = uuid.uuid4().hex, uuid.uuid4().hex
waits = [expect(good), expect(bad)]
comm.send({"op": "batch", "calls": [
    {"op": "call", "id": good, "tool": "echo", "args": {"text": "kept"}, "cell": runtime._cell_id()},
    {"op": "batch", "id": bad, "calls": []},
    "junk",
]})
comm.send({"op": "batch", "calls": [{"op": "call", "id": uuid.uuid4().hex, "tool": "echo", "args": {}}] * 65})
print(waits[0].result(10))
try:
    waits[1].result(10)
except Exception as e:
    print(type(e).__name__, str(e)[:60])
''')
    kept, nested = result.stdout.splitlines()
    assert kept == "kept" and nested.startswith("ToolValidationError malformed tool call: a batch inside a batch")
    reasons = [e["reason"] for e in journal(box, since) if e["event"] == "call-rejected"]
    assert "request must be a JSON object, got str" in reasons
    assert "a batch holds 1 to 64 calls, got 65" in reasons


def test_calls_outside_a_running_cell_are_refused(box) -> None:
    since = len(journal(box))
    started = box.execute('''
import threading
late = {}
def keep_calling():
    for _ in range(100000):
        try:
            tools.echo("tick")
        except tools.ToolError as e:
            late["error"] = (type(e).__name__, e.kind, str(e))
            return
worker = threading.Thread(target=keep_calling, daemon=True)
worker.start()
''')
    assert started.ok
    deadline = time.monotonic() + 30
    while not any(e["event"] == "call-rejected" and e.get("reason") == "no cell is running" for e in journal(box, since)):
        assert time.monotonic() < deadline, "the thread's call after the cell was never refused"
        time.sleep(0.05)  # polling the journal file for the host's event
    # The journal line can land before the refusal reaches the thread: wait for the thread.
    result = box.execute("worker.join(30); print(late['error'][:2]); print(late['error'][2])")
    assert result.ok, result.text
    assert result.stdout.splitlines()[0] == "('ToolUnavailable', 'no_cell')"
    assert "while no cell of this session is running" in result.stdout
