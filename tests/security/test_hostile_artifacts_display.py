"""What a run records and what the CLI shows of it (SECURITY.md H13, H14, H15).

H13: secret values (tool-marked ``Secret`` results and policy ``secrets``
arguments) printed, raised, passed to another tool or printed late from a
thread never reach any file of the run folder; a marker names them, and the
recorded digest is keyed. H14: an approver sees every hidden, space-like,
bidi and tag character escaped, long arguments head and tail, and the
complete arguments with `approvals show`. H15: control sequences in program
output and in a tampered notebook never reach the terminal through `exec`,
`show` or `approvals`, and recorded text is never read as rich markup.

Real sandbox, real CLI processes; terminals are real ptys.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import hashlib
import json
import math
import os
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import nbformat
import pytest
from conftest import CELLGATE, cellgate

from cellgate.gate.audit.journal import read_journal
from cellgate.gate.audit.recorder import journal_path
from cellgate.gate.calls.approval import args_digest

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "sample_tools.py"
TOKEN = "tok-ada-s3cr3t-value"  # what sample_tools.issue_token('ada') marks Secret
# The operator's credential: the cells build it, so no program text holds it.
API_KEY = "sk-live-7f3a9c21e4b0"
BUILD_KEY = "key = 'sk-live-' + '7f3a' + '9c21e4b0'"


def run_in_pty(args: list[str], env: dict[str, str], timeout: float = 300) -> tuple[bytes, int]:
    """Run ``args`` with stdout and stderr on a real terminal (a pty); return all it wrote and its exit code."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))  # wide: nothing wraps
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"{args} did not finish within {timeout} s"
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: every writer of the terminal has closed it
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
        return b"".join(chunks), process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        os.close(master)


def run_files(notebook: Path) -> list[Path]:
    """Every file of a run: its notebook, journal and blobs (and anything else beside them)."""
    return [p for p in notebook.parent.rglob("*") if p.is_file()]


# ------------------------------------------------------------------ H13 secrets

SECRET_POLICY = f'''
[tools]
modules = ["{TOOLS}"]

[policy]
default = "allow"

[policy.tools.fetch_invoice]
secrets = ["api_key"]
'''

LATE = """\
import threading
go, done = threading.Event(), threading.Event()
def work():
    go.wait()
    print('late:', tok, flush=True)
    done.set()
threading.Thread(target=work).start()
print('thread started')
"""


@pytest.fixture(scope="module")
def secret_run(session_factory, tmp_path_factory):
    folder = tmp_path_factory.mktemp("secret-config")
    (folder / "cellgate.toml").write_text(SECRET_POLICY)
    run = tmp_path_factory.mktemp("secret-run")
    box = session_factory(config=folder / "cellgate.toml", tools=[], notebook=run / "run.ipynb")
    results = {
        "issued": box.execute("tok = tools.issue_token('ada')['token']\nprint(len(tok), tok.startswith('tok-ada'))"),
        "printed": box.execute("print('the token is', tok)\nprint({'token': tok})"),
        "raised": box.execute("raise ValueError(f'refused token {tok!r}')"),
        "passed": box.execute("print(tools.echo(tok))\nbig = tools.echo(tok + '.' * 3000)\nprint(len(big))"),
        "argument": box.execute(f"{BUILD_KEY}\nprint(tools.fetch_invoice('inv-1', key)['total'])"),
        "argument printed": box.execute("print(key)\nprint(tools.echo('key=' + key))"),
        "thread": box.execute(LATE),
        "late": box.execute("go.set()\nassert done.wait(60)\nprint('released')"),
    }
    box.close()  # the session's end is written too
    return run / "run.ipynb", results


def test_H13_secret_values_reach_the_cell(secret_run) -> None:
    _, results = secret_run
    assert results["issued"].stdout == "20 True\n"  # the sandbox has the real value
    assert results["passed"].stdout.endswith("3020\n")
    assert results["argument"].stdout == "42\n"
    assert results["raised"].status == "error" and results["late"].stdout == "released\n"


def test_H13_no_file_of_the_run_holds_a_secret_value(secret_run) -> None:
    notebook, _ = secret_run
    files = run_files(notebook)
    assert {p.name for p in files} >= {"run.ipynb", "run.journal.jsonl"}
    assert any(p.parent.name == "run.blobs" for p in files), "the 3 kB echo result should be a blob"
    for path in files:
        data = path.read_bytes()
        for value in (TOKEN, API_KEY):
            for form in (value, json.dumps(value)[1:-1], repr(value)[1:-1]):
                assert form.encode() not in data, f"{form!r} is in {path.name}"
            # Nor its plain digest: a short secret could be recovered from it by trying candidates.
            assert hashlib.sha256(value.encode()).hexdigest().encode() not in data, path.name


def test_H13_markers_name_each_secret_where_it_was(secret_run) -> None:
    notebook, results = secret_run
    token, key = "[secret: issue_token result]", "[secret: fetch_invoice argument api_key]"
    assert results["printed"].stdout == f"the token is {token}\n{{'token': '{token}'}}\n"
    assert token in results["raised"].error["evalue"]
    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    raised = code[2]
    assert raised.metadata.cellgate.error["evalue"] == f"refused token '{token}'"
    assert any(token in "".join(o.get("traceback", [])) for o in raised.outputs)
    echo, blob_call = code[3].metadata.cellgate.calls
    assert echo["args"] == {"text": token} and echo["result"] == token
    assert blob_call["args"]["text"].startswith(token) and "result_blob" in blob_call
    blob = (notebook.parent / blob_call["result_blob"]).read_text()
    assert blob.startswith(f'"{token}...')
    assert blob_call["result_sha256"] == hashlib.sha256(blob.encode()).hexdigest()
    assert code[5].outputs[0]["text"] == f"{key}\nkey={key}\n"
    assert code[5].metadata.cellgate.calls[0]["args"] == {"text": f"key={key}"}
    late = code[6].metadata.cellgate["late_outputs"]
    assert "".join(o.get("text", "") for o in late) == f"late: {token}\n"


def test_H13_secret_digests_are_keyed_with_the_host_key(secret_run) -> None:
    notebook, _ = secret_run
    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    issued = code[0].metadata.cellgate.calls[0]["result"]["token"]
    argument = code[4].metadata.cellgate.calls[0]["args"]["api_key"]
    for digest, value, name in ((issued, TOKEN, "issue_token result"),
                                (argument, API_KEY, "fetch_invoice argument api_key")):
        assert digest["redacted"] is True and digest["secret"] == name and "sha256" not in digest
        assert len(digest["hmac_sha256"]) == 64 and digest["hmac_sha256"] != hashlib.sha256(value.encode()).hexdigest()
        assert len(digest["key_id"]) == 16
    # The argument digest the approval binds to covers the keyed digest, not the value.
    call = code[4].metadata.cellgate.calls[0]
    assert call["args_sha256"] == args_digest(call["args"])
    assert call["args_sha256"] != args_digest({"invoice_id": "inv-1", "api_key": API_KEY})


def test_H13_the_scrubbed_run_still_verifies(secret_run) -> None:
    notebook, _ = secret_run
    assert not read_journal(journal_path(notebook)).problem
    done = cellgate("verify", str(notebook))
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout


def test_H13_scrubbing_stays_linear_with_thousands_of_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool that marks a new value secret on each of 5,000 calls: each record is still a few scans, and the
    patterns are rebuilt a logarithmic number of times per secret, not all of them on every call. Counted, not
    timed (benchmarks/host_bounds.py measures the cost as a ratio)."""
    from cellgate.gate.calls import scrubber

    kept = scrubber.SecretScrubber()
    kept.add("abcdefgh", "long")
    kept.add("cdef", "short")  # inside the longer one: the longer match wins there
    kept.add("abc", "too short")  # under MIN_CHARS: never scrubbed
    assert kept.scrub_text("abcdefgh cdef abc") == "[secret: long] [secret: short] abc"
    compiled: list[int] = []
    real_compile = scrubber._compile
    monkeypatch.setattr(scrubber, "_compile", lambda forms: (compiled.append(len(forms)), real_compile(forms))[1])
    n = 5000
    tokens = [f"tok-{i:06d}-{os.urandom(6).hex()}" for i in range(n)]  # one form each (raw, repr and JSON agree)
    for index, value in enumerate(tokens):
        kept.add(value, f"issue_token result {index}")
    # A binary counter of automatons: at most log2(n) + 1 of them (a text's scans), each form compiled into at most
    # that many.
    bound = math.floor(math.log2(n + 2)) + 1
    assert len(kept._levels) <= bound, len(kept._levels)
    assert sum(compiled) <= (n + 2) * bound, sum(compiled)  # rebuilding everything per call: n * n / 2
    text = " ".join(tokens[::500]) + " plain output line\n" * 50_000  # about 1 MB
    scrubbed = kept.scrub({"output_type": "stream", "text": text})["text"]
    assert not any(t in scrubbed for t in tokens) and scrubbed.startswith("[secret: issue_token result 0] ")
    assert scrubbed.count("[secret: issue_token result") == 10


# ------------------------------------------------------------------ H14 the approval view

APPROVE_POLICY = f'''
[tools]
modules = ["{TOOLS}"]

[policy]
default = "allow"
approver = "queue"
approval_timeout = 120

[policy.tools.echo]
decision = "approve"
'''

# Built in the sandbox; each part is something that must not pass as blank, invisible or reordered.
SPOOF = ("'ops@acme.example' + '\\u2003' * 2000 + ',attacker@evil.example' + ' \\u2800|\\u061c|\\u2028|\\u3164|'"
         " + ''.join(chr(0xE0000 + ord(c)) for c in 'hidden') + '|\\u00a0\\u202e|\\x1b]52;c;ZXZpbA==\\x07|[bold]x[/bold]'"
         " + 'z' * 3000 + 'END'")
HIDDEN = ["\u2003", "\u2800", "\u061c", "\u2028", "\u3164", "\u00a0", "\u202e", "\x1b", "\x07",
          *(chr(0xE0000 + ord(c)) for c in "hidden")]


def wait_for_request(folder: Path, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while True:
        pending = sorted(folder.glob("*.request.json"))
        if pending:
            return pending[0].name.removesuffix(".request.json")
        assert time.monotonic() < deadline, "no approval request appeared"
        time.sleep(0.05)  # polling the queue folder the gate writes to


def test_H14_approvals_list_and_show_escape_everything_hidden(session_factory, tmp_path: Path) -> None:
    queue = tmp_path / "approvals"
    queue.mkdir(mode=0o700)
    (tmp_path / "cellgate.toml").write_text(APPROVE_POLICY)
    env = {"CELLGATE_APPROVALS_DIR": str(queue)}
    old = os.environ.get("CELLGATE_APPROVALS_DIR")
    os.environ["CELLGATE_APPROVALS_DIR"] = str(queue)  # the session's queue approver reads it at start
    try:
        box = session_factory(config=tmp_path / "cellgate.toml", tools=[])
    finally:
        if old is None:
            os.environ.pop("CELLGATE_APPROVALS_DIR")
        else:
            os.environ["CELLGATE_APPROVALS_DIR"] = old
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pending = pool.submit(box.execute, f"try:\n    tools.echo({SPOOF})\nexcept tools.ToolDenied as e:\n    print(e)")
    pool.shutdown(wait=False)
    request_id = wait_for_request(queue)
    request = json.loads((queue / f"{request_id}.request.json").read_text())
    text = request["args"]["text"]
    assert text.startswith("ops@acme.example\u2003\u2003") and text.endswith("zzzEND")

    listed = cellgate("approvals", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    out = listed.stdout
    for char in HIDDEN:
        assert char not in out, f"{char!r} printed raw by approvals list"
    assert "ops@acme.example⟨2000 × \\u2003⟩,attacker@evil.example" in out
    assert " \\u2800|\\u061c|\\u2028|\\u3164|\\U000e0068\\U000e0069\\U000e0064" in out
    assert "|\\xa0\\u202e|" in out and "\\u001b]52;c;ZXZpbA==\\u0007|[bold]x[/bold]" in out
    assert "characters elided; `cellgate approvals show " + request_id + "` prints all⟩ … " in out
    assert out.rstrip().count("\n") < 12 and "zzzEND" in out  # head and tail, not 3,000 characters of z
    assert f"sha256:    {request['args_sha256']}" in out
    assert "cell line 2 (reported by the kernel): " in out

    shown = cellgate("approvals", "show", request_id, env=env)
    assert shown.returncode == 0, shown.stderr
    full = shown.stdout
    for char in HIDDEN:
        assert char not in full, f"{char!r} printed raw by approvals show"
    (argument,) = [line for line in full.splitlines() if line.strip().startswith('"text": ')]
    assert argument.count("\\u2003") == 2000 and argument.endswith('z' * 3000 + 'END"')
    assert ",attacker@evil.example" in full and "\\U000e0068\\U000e0069\\U000e0064\\U000e0064\\U000e0065\\U000e006e" in full
    assert f"sha256:    {request['args_sha256']}" in full and "MISMATCH" not in full
    assert request["args_sha256"] == args_digest(request["args"])

    assert cellgate("approvals", "deny", request_id, "--reason", "looks spoofed", env=env).returncode == 0
    result = pending.result(120)
    assert result.stdout == ("tool 'echo' was denied by approver queue:uid 0; the policy required approval "
                             "(rule tools.echo.decision): looks spoofed\n")


def test_H14_a_request_whose_digest_does_not_match_its_arguments_is_flagged(tmp_path: Path) -> None:
    args = {"to": "a@b.example"}
    request = {"id": "s-7", "session": "s", "seq": 7, "tool": "send", "args": args, "args_sha256": "0" * 64,
               "cell_line": None, "source_line": None, "requested": 0, "deadline": 1e12}
    (tmp_path / "s-7.request.json").write_text(json.dumps(request))
    shown = cellgate("approvals", "show", "s-7", env={"CELLGATE_APPROVALS_DIR": str(tmp_path)})
    assert shown.returncode == 1
    assert f"sha256:    {args_digest(args)}" in shown.stdout and "MISMATCH" in shown.stdout
    bad = cellgate("approvals", "show", "../s-7", env={"CELLGATE_APPROVALS_DIR": str(tmp_path)})
    assert bad.returncode == 2 and "not an approval request id" in bad.stderr


# ------------------------------------------------------------------ H15 terminal control

PROGRAM = r'''
print("clip \x1b]52;c;ZXZpbA==\x07 clear \x1b[2J\x1b[H up \x1b[10A title \x1b]0;pwned\x1b\\ c1 \x9b2J [bold]x[/bold]")
import sys
sys.stderr.write("err \x1b[31mred\x1b[0m \x1bP+q544e\x1b\\ bell \x07\n")
raise RuntimeError("boom \x1b]52;c;ZXZpbA==\x07 \x1b[1;1H[red]y[/red]")
'''
NO_STYLES = {"TERM": "dumb"}  # rich then styles nothing, so any ESC byte would be the program's


def test_H15_exec_on_a_terminal_shows_control_sequences_escaped(tmp_path: Path, runsc: object) -> None:
    program = tmp_path / "hostile.py"
    program.write_text(PROGRAM)
    out, code = run_in_pty([*CELLGATE, "exec", str(program), "--notebook", str(tmp_path / "run.ipynb")],
                           env={**os.environ, **NO_STYLES})
    assert code == 1, out
    text = out.decode("utf-8", "replace")
    for byte in (b"\x1b", b"\x07", b"\xc2\x9b"):
        assert byte not in out, f"{byte!r} reached the terminal"
    assert "clip \\x1b]52;c;ZXZpbA==\\x07 clear \\x1b[2J\\x1b[H up \\x1b[10A" in text
    assert "title \\x1b]0;pwned\\x1b\\ c1 \\x9b2J [bold]x[/bold]" in text
    assert "err red \\x1bP+q544e\\x1b\\ bell \\x07" in text  # colours dropped, the DCS query shown
    assert "RuntimeError: boom \\x1b]52;c;ZXZpbA==\\x07" in text and "[red]y[/red]" in text
    assert "hostile.py ended with status error" in text

    # Piped, the program's output is its data: passed on byte for byte (README, "Terminal output").
    piped = subprocess.run([*CELLGATE, "exec", str(program), "--notebook", str(tmp_path / "piped.ipynb")],
                           capture_output=True, timeout=300, env={**os.environ, **NO_STYLES})
    assert b"clip \x1b]52;c;ZXZpbA==\x07 clear \x1b[2J" in piped.stdout


def tampered(tmp_path: Path) -> Path:
    """An audit notebook someone edited: control sequences and markup in every field `show` prints."""
    osc, csi = "\x1b]52;c;ZXZpbA==\x07", "\x1b[2J\x1b[1;1H"
    nb = nbformat.v4.new_notebook()
    nb.metadata["cellgate"] = {
        "session_id": f"{csi}abcdef", "journal": {"file": "run.journal.jsonl", "seq": 1, "hash": "0" * 64},
        "sandbox": {"runtime": f"gvisor{osc}", "runsc_version": "[bold]v[/bold]", "platform": "\x9b2J"},
        "agent": {"model": f"{osc}[link=https://evil.example]m[/link]", "mode": csi, "turns": [], "usage": {},
                  "ended": {"reason": "\x1b[8mhidden"}},
    }
    cell = nbformat.v4.new_code_cell(source=f"{osc}{csi}[bold]x[/bold] first line\nsecond")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"out {osc}{csi}\n")]
    cell.metadata["cellgate"] = {
        "status": f"{csi}ok", "started": "x", "ended": "y",
        "error": {"ename": f"[red]E{csi}", "evalue": f"value {osc}\nline 2"},
        "calls": [{"seq": 1, "tool": f"\x1b[1A[red]t[/red]{osc}", "decision": f"allow{csi}", "ok": False,
                   "error": {"kind": f"denied{osc}"}, "duration_ms": "1e9"}],
    }
    nb.cells = [cell]
    path = tmp_path / "run.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_H15_show_of_a_tampered_notebook_prints_text_not_control(tmp_path: Path) -> None:
    notebook = tampered(tmp_path)
    out, code = run_in_pty([*CELLGATE, "show", str(notebook)], env={**os.environ, **NO_STYLES})
    assert code == 0, out
    text = out.decode("utf-8", "replace")
    for byte in (b"\x1b", b"\x07", b"\xc2\x9b"):
        assert byte not in out, f"{byte!r} reached the terminal"
    assert "\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J" in text  # the table's first-line column (wrapped at 80 here)
    assert "[bold]v[/bold]" in text and "[link=https://evil.example]m[/link]" in text
    assert "\\x1b[1A[red]t[/red]" in text and "[red]E\\x1b[2J" in text and "\\x1b[8mhidden" in text
    piped = cellgate("show", str(notebook), env={"COLUMNS": "400"})
    assert piped.returncode == 0 and "\x1b" not in piped.stdout and "\x07" not in piped.stdout
    assert "\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\x1b[1;1H[bold]x[/bold] first" in piped.stdout
