"""The host's own bounds against a hostile kernel (SECURITY.md section 12: B1, B2, B4, B5).

The attacker is the cell: it owns the kernel and its session key. Each test
does the attack from inside the real sandbox and measures the host side: the
gate runs in this test process (BlockingSession), so its peak resident memory
(VmHWM after a reset through /proc/self/clear_refs), the bytes it writes, the
journal and notebook sizes and the latency of the next call are the host's.
Each then checks that the session (after the restart the bound may cause)
still works.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest

from cellgate.gate.audit.recorder import journal_path
from cellgate.gate.audit.verify import verify
from cellgate.gate.calls.approval import ApprovalRequest, describe_request
from cellgate.gate.calls.dispatch import CallRecord
from cellgate.gate.review.report import render
from cellgate.gate.review.show import show
from cellgate.gate.session.bounds import MAX_OUTPUT_VALUES, json_values
from cellgate.gate.session.cells.refusals import RefusalLedger

# CPU or wall time counts here: never beside another such test (tests/conftest.py, the xdist groups).
pytestmark = pytest.mark.xdist_group("cpu")

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "sample_tools.py"
MAX_MESSAGE_MB = 16


class HostMemory:
    """Peak resident memory of this process (which hosts the gate) over a block."""

    def __enter__(self) -> HostMemory:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        self.before = self._field("VmRSS")
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = self._field("VmHWM")

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.before) / 1024

    @staticmethod
    def _field(name: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {name} in /proc/self/status")


def written_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def journal(box) -> list[dict]:
    return [json.loads(line) for line in journal_path(box.session.notebook_path).read_text().splitlines()]


def code_cells(box) -> list:
    nb = nbformat.read(box.session.notebook_path, as_version=4)
    return [c for c in nb.cells if c.cell_type == "code"]


# ----------------------------------------------------------------- B1
SEND = '''
import json
_k = get_ipython().kernel
_s = _k.session
_idents = {}
_feed = type(_s).feed_identities
def _spy(msg_list, copy=True):   # learn the host's identities from what it sends (the control one too)
    idents, rest = _feed(_s, msg_list, copy)
    if idents:
        _idents["last"] = [bytes(getattr(i, "bytes", i)) for i in idents]
    return idents, rest
_s.feed_identities = _spy
tools.echo("learn")   # the host's reply arrives on control
def over(channel, size):
    """One signed message of `size` bytes on the kernel's own socket for `channel`."""
    parent = _k.get_parent("shell")
    msg_type = {"iopub": "display_data", "stdin": "input_request", "shell": "execute_reply",
                "control": "comm_msg"}[channel]
    msg = _s.msg(msg_type, {}, parent=parent)
    body = b"A" * size  # never parsed: refused by the host's socket before it is read
    parts = [_s.pack(msg["header"]), _s.pack(msg["parent_header"]), _s.pack({}), body]
    frames = [b"<IDS|MSG>", _s.sign(parts), *parts]
    if channel == "iopub":
        _k.iopub_socket.send_multipart([b"display_data", *frames])
        return
    if channel == "control":
        idents = _idents["last"]
    else:
        ident = _k._parent_ident["shell"]
        idents = [ident] if isinstance(ident, bytes) else list(ident)
    sock = {"stdin": _k.stdin_socket, "shell": _k.shell_stream.socket if _k.shell_stream else None,
            "control": _k.control_stream.socket if _k.control_stream else None}[channel]
    sock.send_multipart([*idents, *frames])
'''


def verify_live(notebook: Path) -> list[str]:
    """verify's findings on a run whose session is still open, but the one that says it is still open."""
    return [p for p in verify(notebook) if "without a session-ended or recovered record" not in p]


@pytest.fixture(scope="module")
def bounded(session_factory):
    return session_factory(memory_mb=1024, max_message_mb=MAX_MESSAGE_MB, cell_timeout=60.0)


@pytest.mark.parametrize("channel", ["stdin", "iopub", "shell", "control"])
def test_B1_a_giant_message_on_any_channel_is_dropped_at_the_socket(bounded, channel: str) -> None:
    box = bounded
    assert box.execute("print(tools.echo('warm'))").stdout == "warm\n"  # the host's control ident is known
    with HostMemory() as host:
        result = box.execute(SEND + f"over({channel!r}, 200 << 20)\nimport time\ntime.sleep(30)")
    assert result.status == "error", (result.status, result.error, result.limits_hit)
    assert "message-size" in result.limits_hit
    assert result.error["ename"] == "MessageTooLarge" and f"{MAX_MESSAGE_MB} MB" in result.error["evalue"]
    events = [e for e in journal(box) if e["event"] == "message-too-large"]
    assert events and events[-1]["limit_bytes"] == MAX_MESSAGE_MB << 20 and channel in events[-1]["channel"]
    # 200 MB were sent; the host read none of it (before: 6 GB for 230 MB on stdin).
    assert host.growth_mb < 4 * MAX_MESSAGE_MB + 64, host.growth_mb
    # The session restarted its kernel and says so; the next cell runs and calls a tool.
    assert box.execute("print(tools.echo('after'))").stdout == "after\n"
    assert "over the host's size limit" in "".join(
        c.source for c in nbformat.read(box.session.notebook_path, as_version=4).cells if c.cell_type == "markdown")


@pytest.mark.parametrize("lists", [4 << 20, 1 << 20], ids=["12 MB, over the output limit", "3 MB, under it"])
def test_B1_an_output_too_costly_to_record_is_never_parsed(bounded, lists: int) -> None:
    """Under the socket bound: over what a cell may record, or small text holding millions of values."""
    box = bounded
    with HostMemory() as host:
        result = box.execute(SEND + f'''
parent = _k.get_parent("shell")
msg = _s.msg("display_data", {{}}, parent=parent)
body = b'{{"data": {{"application/json": [' + b"[]," * {lists} + b'[]]}}, "metadata": {{}}}}'
parts = [_s.pack(msg["header"]), _s.pack(msg["parent_header"]), _s.pack({{}}), body]
_k.iopub_socket.send_multipart([b"display_data", b"<IDS|MSG>", _s.sign(parts), *parts])
print("sent", len(body))
''')
    assert result.status == "ok", (result.status, result.error)
    assert "output" in result.limits_hit
    assert "bytes dropped" in result.text
    # Parsed, each empty list is a 56-byte object: 4 million of them ~1 GB per copy, 1 million ~250 MB.
    assert host.growth_mb < 4 * MAX_MESSAGE_MB + 64, host.growth_mb
    assert box.execute("print(tools.echo('after'))").stdout == "after\n"


# ----------------------------------------------------------------- B2
REFUSING = f'''
[tools]
modules = ["{TOOLS}"]

[policy]
default = "deny"

[policy.tools.echo]
decision = "allow"

[sandbox]
max_refusals_per_cell = 100
cell_timeout = 60
'''


def test_B2_a_refusal_flood_is_budgeted_coalesced_and_stops_the_cell(session_factory, tmp_path_factory) -> None:
    folder = tmp_path_factory.mktemp("refusals")
    (folder / "cellgate.toml").write_text(REFUSING)
    box = session_factory(config=folder / "cellgate.toml", tools=[])
    assert box.execute("print(tools.echo('warm'))").stdout == "warm\n"
    notebook = box.session.notebook_path
    journal_before = journal_path(notebook).stat().st_size
    with HostMemory() as host:
        result = box.execute('''
import time, uuid
from cellgate.kernel import runtime
client = runtime.client()
comm, cell = client._open_comm(), runtime._cell_id()
end = time.monotonic() + 20
sent = 0
while time.monotonic() < end:   # denied and unknown-tool calls, 64 to a batch, nobody waiting
    comm.send({"op": "batch", "calls": [{"op": "call", "id": uuid.uuid4().hex, "cell": cell, "args": {},
               "tool": ("add", "no_such_tool")[i % 2]} for i in range(64)]})
    sent += 64
print("flood over", sent)
''')
    assert result.status == "killed", (result.status, result.error, result.limits_hit)
    assert "refusals" in result.limits_hit
    cell = code_cells(box)[-1].metadata.cellgate
    # Two distinct refusals, each recorded once with its repeats; the rest summarised in one record.
    assert len(cell.calls) <= 4, cell.calls
    assert sum(1 + c.get("repeated", 0) for c in cell.calls) == 100
    assert cell.refusals_dropped["count"] >= 1
    assert {cell.refusals_dropped["first_tool"], cell.refusals_dropped["last_tool"]} <= {"add", "no_such_tool"}
    grown = journal_path(notebook).stat().st_size - journal_before
    assert grown < 256 << 10, grown  # before: 220 MB of journal for the same flood
    assert notebook.stat().st_size < 256 << 10
    assert host.growth_mb < 128, host.growth_mb
    box.restart()
    assert box.execute("print(tools.echo('after'))").stdout == "after\n"
    # Verified once the killed kernel is gone and the next cell ended (the notebook rewritten): until then the old
    # kernel's death and the flood's last messages may still be journalled after the killed cell's end.
    assert verify_live(notebook) == []  # the coalesced record is the journal's, rebuilt the same way


# ----------------------------------------------------------------- B4
CHURN = '''
import threading
tools.echo("warm")  # the session's first call opens its comm: not what is measured
go = threading.Event()
import time
def churn():
    go.wait()
    for _ in range(700):   # paced, so the kernel's own IOPub queue is not what the next call waits on
        print(".", end="", flush=True)
        time.sleep(0.002)
churner = threading.Thread(target=churn, daemon=True)
churner.start()
for _ in range(112):   # each its own message: the cell records 8 MB (output_limit_kb), head and tail
    print("B" * 65535, flush=True)
'''


def test_B4_late_output_churn_does_not_rewrite_the_world_and_calls_are_answered_through_it(session_factory) -> None:
    box = session_factory(cell_timeout=120.0)
    big = box.execute(CHURN)
    assert big.status == "ok"
    assert box.session.notebook_path.stat().st_size > 7 << 20  # the world a late output used to rewrite
    wrote = written_bytes()
    result = box.execute('''
go.set()
calls = 0
while churner.is_alive():   # calls for as long as the flood lasts, however many that is
    calls += 1
    assert tools.echo("x") == "x"
print(calls)
''')
    assert result.status == "ok", result.error
    # Every call made during the flood was answered, and the gate's journal says they were answered through it:
    # the count comes from the record (its call-finished records, between the late outputs it journalled), not
    # from the cell's loop. How long they waited is benchmarks/host_bounds.py's (a ratio against a quiet loop, with
    # its target): here, what the host wrote meanwhile is what it counts.
    records = journal(box)
    churn_id, calls_id = [r["msg_id"] for r in records if r["event"] == "cell-sent"][-2:]
    flooded = [r["seq"] for r in records if r["event"] == "late-output" and r["msg_id"] == churn_id]
    answered = [r["seq"] for r in records if r["event"] == "call-finished" and r["msg_id"] == calls_id
                and r["call"]["ok"]]
    assert len(answered) == int(result.stdout) > 0, (len(answered), result.stdout)
    assert flooded, "no late output was journalled"
    during = [seq for seq in answered if flooded[0] < seq < flooded[-1]]
    assert during, f"no call answered between the first and the last late output ({flooded[0]}..{flooded[-1]})"
    deadline = time.monotonic() + 60
    while len(code_cells(box)[0].metadata.cellgate.get("late_outputs", [])) < 100:
        assert time.monotonic() < deadline, "late output never reached the notebook"
        time.sleep(0.1)  # polling the notebook the host rewrites on its timer
    box.execute("pass")
    # The 7 MB notebook is rewritten a handful of times, not once per late output (before: 5.4 GB).
    assert written_bytes() - wrote < 150 << 20, written_bytes() - wrote
    late = code_cells(box)[0].metadata.cellgate.late_outputs
    assert len(late) <= 101 and "the rest was dropped" in late[-1]["text"]


# ----------------------------------------------------------------- B5
FORGER = '''
import threading, uuid
from cellgate.kernel import runtime
go, done = threading.Event(), threading.Event()
seen = []
def forge():
    go.wait()
    client = runtime.client()
    comm = client._open_comm()
    # 1. a hand-made call with no cell claim and a line of its choosing
    from concurrent.futures import Future
    call_id, fut = uuid.uuid4().hex, Future()
    client._pending[call_id] = ("raw", fut)
    comm.send({"op": "call", "id": call_id, "tool": "echo", "args": {"text": "unclaimed"}, "line": 2})
    try:
        fut.result(20)
        seen.append("accepted")
    except Exception as e:
        seen.append(type(e).__name__ + ": " + str(e)[:60])
    # 2. the runtime patched to claim the cell that is running now
    honest, runtime._cell_id = runtime._cell_id, lambda: target
    seen.append(tools.echo("forged"))
    runtime._cell_id = honest
    done.set()
threading.Thread(target=forge, name="forger").start()
'''


def test_B5_calls_are_bound_to_the_running_cell_and_claims_are_labelled(session_factory, tmp_path) -> None:
    box = session_factory()
    assert box.execute(FORGER).ok
    second = box.execute("target = runtime._cell_id()\n# an innocent comment\ngo.set()\nassert done.wait(30)\n"
                         "print(seen)")
    assert second.status == "ok", second.error
    refused, forged = eval(second.stdout)
    assert refused.startswith("ToolValidationError: malformed tool call: call of 'echo' names no cell"), refused
    assert forged == "forged"
    rejected = [e for e in journal(box) if e["event"] == "call-rejected"]
    assert any("names no cell" in e["reason"] for e in rejected)
    # Attributed by the host to the cell that was running; what the kernel said is kept as its claim.
    calls = code_cells(box)[-1].metadata.cellgate.calls
    assert [c["args"] for c in calls] == [{"text": "forged"}]
    claimed = calls[0]["claimed"]
    assert claimed["thread"] == "forger" and "cell_line" not in calls[0] and "source_line" not in calls[0]
    assert claimed.get("source_line") == second_line(box, claimed["line"])
    # Every view labels the claims as the kernel's.
    from rich.console import Console

    console = Console(record=True, width=200)
    show(box.session.notebook_path, console)
    assert "reported by the kernel: line" in console.export_text()
    assert "reported by the kernel: line" in render(box.session.notebook_path)
    request = ApprovalRequest(id="x-1", session="s", seq=1, tool="echo", args={}, args_sha256="0" * 64,
                              cell_line=claimed["line"], source_line=claimed.get("source_line"), requested=0,
                              deadline=1e12)
    assert "(reported by the kernel)" in describe_request(request)
    assert verify_live(box.session.notebook_path) == []
    assert box.execute("print(tools.echo('alive'))").stdout == "alive\n"


def second_line(box, line: int) -> str | None:
    source = code_cells(box)[-1].source.splitlines()
    return source[line - 1] if 1 <= line <= len(source) else None


def test_json_values_counts_structure_not_text() -> None:
    assert json_values(b'{"name": "stdout", "text": "' + b"[1, 2], {a}, " * 100_000 + b'"}') <= 6
    assert json_values(b"[" + b"[]," * 200_000 + b"[]]") > MAX_OUTPUT_VALUES
    assert json_values(b"[" + b'"a",' * 200_000 + b'"a"]') > MAX_OUTPUT_VALUES
    assert json_values(b'["' + b'\\",[' * 200_000 + b'"]') <= 3  # escaped quotes stay inside the string


def test_refusal_ledger_coalesces_counts_and_summarises() -> None:
    ledger = RefusalLedger(budget=3)

    def refused(seq: int, tool: str, args: dict) -> CallRecord:
        return CallRecord(seq=seq, id=f"{seq:016x}", tool=tool, args=args, started="", args_sha256=str(args),
                          error={"kind": "denied", "message": f"{tool} denied"})

    assert ledger.note("add", refused(1, "add", {})) == "record"
    assert ledger.note("add", refused(2, "add", {})) == "coalesced"
    big = refused(3, "add", {"x": "y" * 5000})
    assert ledger.note("add", big) == "record" and "(not recorded)" in big.args
    assert ledger.exhausted
    assert ledger.note("nope") == "dropped" and ledger.note("last") == "dropped"
    assert ledger.summary() == [
        ("refusals-coalesced", {"call_seq": 1, "tool": "add", "repeated": 1}),
        ("refusals-dropped", {"count": 2, "first_tool": "nope", "last_tool": "last", "budget": 3})]
