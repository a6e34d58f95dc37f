"""The agent loop (`cellgate run`) through the real `anthropic` SDK against the local fake Messages API.

Every program runs in the real gVisor sandbox; the fake API only stands in
for the model, answering from a script (cellgate.gate.testing).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import nbformat
import pytest
from agent_runs import echo_last_result, result_text, results_of, run_agent
from conftest import CELLGATE, COUNTED_TOOLS, SAMPLE_TOOLS, cellgate

from cellgate.extensions.anthropic.testing import FakeMessagesAPI, reply, text, tool_use
from cellgate.gate.audit.journal import read_journal
from cellgate.gate.audit.recorder import journal_path

SAMPLE = SAMPLE_TOOLS
COUNTED = COUNTED_TOOLS
# A 1x1 PNG, for the image path.
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def test_a_denied_call_and_a_failing_cell_go_back_as_errors_and_the_loop_goes_on(tmp_path: Path) -> None:
    config = f"""
[tools]
modules = ["{SAMPLE}"]
[policy]
default = "allow"
[policy.tools.explode]
decision = "deny"
"""
    script = [
        reply(tool_use("execute_python", {"code": "tools.explode('boom')"}),
              tool_use("execute_python", {"code": "x = 1 / 0"}),
              tool_use("execute_python", {"code": ""}),
              tool_use("no_such_tool", {})),
        reply(tool_use("execute_python", {"code": "print(tools.add(40, 2))"})),
        echo_last_result("Recovered:"),
    ]
    run, requests, notebook = run_agent(tmp_path, script, config=config, tools=())
    assert run.ended == "end_turn" and run.final_text == "Recovered: 42"
    denied, failed, empty, unknown = results_of(requests[1])
    assert denied["is_error"] and "ToolDenied: tool 'explode' was denied by policy rule tools.explode" in result_text(denied)
    assert failed["is_error"] and "ZeroDivisionError: division by zero" in result_text(failed)
    assert "x = 1 / 0" in result_text(failed)  # the short traceback names the failing line
    assert empty["is_error"] and "execute_python needs" in result_text(empty)
    assert unknown["is_error"] and "no tool named 'no_such_tool'" in result_text(unknown)
    nb = nbformat.read(notebook, as_version=4)
    statuses = [c.metadata.cellgate["status"] for c in nb.cells if c.cell_type == "code"]
    assert statuses == ["error", "error", "ok"]


def test_direct_mode_offers_the_tools_and_gates_and_records_each_call(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = f"""
[tools]
modules = ["{COUNTED}", "{SAMPLE}"]
[policy]
default = "allow"
[policy.tools.explode]
decision = "deny"
"""
    count = tmp_path / "count"
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(count))
    script = [
        reply(tool_use("add", {"a": 2, "b": 3}), tool_use("explode", {"reason": "x"}),
              tool_use("add", {"a": "two"})),
        reply(tool_use("charge", {"amount": 5})),
        reply(text("done")),
    ]
    run, requests, notebook = run_agent(tmp_path, script, config=config, tools=(), mode="direct")
    assert run.ended == "end_turn"
    offered = {t["name"]: t for t in requests[0]["tools"]}
    assert "execute_python" not in offered and {"add", "charge", "explode"} <= set(offered)
    assert offered["add"]["input_schema"]["required"] == ["a"]
    added, denied, invalid = results_of(requests[1])
    assert (added["is_error"], result_text(added)) == (False, "5")
    assert denied["is_error"] and result_text(denied).startswith("ToolDenied: tool 'explode' was denied")
    assert invalid["is_error"] and result_text(invalid).startswith("ToolValidationError: tool 'add': argument a")
    assert count.read_text().splitlines() == ["5"]

    nb = nbformat.read(notebook, as_version=4)
    direct = [c for c in nb.cells if c.metadata.cellgate.get("kind") == "direct"]
    assert [c.source for c in direct] == ["tools.add(a=2, b=3)", "tools.explode(reason='x')", "tools.add(a='two')",
                                          "tools.charge(amount=5)"]
    assert [c.metadata.cellgate.calls[0]["decision"] for c in direct] == ["allow", "deny", "invalid", "allow"]
    assert [c.metadata.cellgate["status"] for c in direct] == ["ok", "error", "error", "ok"]
    assert direct[1].outputs[0]["ename"] == "ToolDenied"
    assert cellgate("verify", str(notebook)).returncode == 0
    # Replay reruns each direct call in the kernel against its recorded result; nothing is charged again.
    count.write_text("")
    replayed = cellgate("replay", str(notebook))
    assert "cell 1: recorded ok, replayed ok" in replayed.stdout and "live calls: 0" in replayed.stdout
    assert count.read_text() == ""


def test_hybrid_mode_keeps_a_direct_only_tool_out_of_code(tmp_path: Path) -> None:
    config = f"""
[tools]
modules = ["{SAMPLE}"]
[policy]
default = "allow"
[policy.tools.echo]
expose = "direct"
[policy.tools.add]
expose = "both"
"""
    script = [
        reply(tool_use("execute_python", {"code": "print(tools.add(1, 1))\ntools.echo('from code')"})),
        reply(tool_use("echo", {"text": "on my own turn"})),
        reply(text("done")),
    ]
    run, requests, notebook = run_agent(tmp_path, script, config=config, tools=(), mode="hybrid")
    assert run.ended == "end_turn"
    assert [t["name"] for t in requests[0]["tools"]] == ["execute_python", "add", "echo"]
    assert "tools.echo" not in requests[0]["system"] and "tools.add(a: int, b: int = 1)" in requests[0]["system"]
    [from_code] = results_of(requests[1])
    assert from_code["is_error"] and result_text(from_code).startswith("2\n")
    assert "may only be called by the model on its own turn" in result_text(from_code)
    [direct] = results_of(requests[2])
    assert (direct["is_error"], result_text(direct)) == (False, '"on my own turn"')


def test_the_model_sees_a_trimmed_output_and_images_while_the_notebook_keeps_everything(tmp_path: Path) -> None:
    program = ("print('HEAD-' + 'x' * 50000 + '-TAIL')\n"
               "from IPython.display import Image, display\n"
               f"display(Image(data=__import__('base64').b64decode('{PIXEL}'), format='png'))")
    script = [reply(tool_use("execute_python", {"code": program})), reply(text("seen"))]
    run, requests, notebook = run_agent(tmp_path, script, output_budget=1200)
    [result] = results_of(requests[1])
    seen = result_text(result)
    assert seen.startswith("HEAD-xxx") and "-TAIL" in seen and len(seen) < 1400
    assert "characters dropped here to fit the output budget; the full output is in the audit notebook run.ipynb" in seen
    image = [b for b in result["content"] if b["type"] == "image"]
    assert image and base64.b64decode(image[0]["source"]["data"]) == base64.b64decode(PIXEL)
    nb = nbformat.read(notebook, as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    assert len(code.outputs[0]["text"]) == len("HEAD-") + 50000 + len("-TAIL") + 1


def cli_run(tmp_path: Path, api: FakeMessagesAPI, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.url}
    return subprocess.Popen([*CELLGATE, "run", "the task", "--tools", str(SAMPLE), "--notebook",
                             str(tmp_path / "run.ipynb"), "--model", "claude-test", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)


def test_max_turns_ends_the_run_and_the_notebook_says_so(tmp_path: Path, runsc: object) -> None:
    busy = [reply(tool_use("execute_python", {"code": f"print({n})"})) for n in range(5)]
    with FakeMessagesAPI(busy) as api:
        with cli_run(tmp_path, api, "--max-turns", "2") as process:
            out, err = process.communicate(timeout=300)
        assert process.returncode == 1, err
        assert len(api.requests) == 2
    assert "ended: max_turns after 2 turn(s)" in " ".join(err.split())
    agent = nbformat.read(tmp_path / "run.ipynb", as_version=4).metadata.cellgate.agent
    assert agent["ended"]["reason"] == "max_turns" and "after 2 turns" in agent["ended"]["detail"]


def test_ctrl_c_during_a_running_cell_interrupts_it_and_completes_the_notebook(tmp_path: Path, runsc: object) -> None:
    program = "import time\nprint('started', flush=True)\ntime.sleep(600)"
    with FakeMessagesAPI([reply(tool_use("execute_python", {"code": program}))]) as api:
        with cli_run(tmp_path, api) as process:
            journal = journal_path(tmp_path / "run.ipynb")
            deadline = time.monotonic() + 120
            while not (journal.exists() and any(
                    r["event"] == "output" and "started" in json.dumps(r) for r in read_journal(journal).records)):
                assert process.poll() is None and time.monotonic() < deadline, "the cell never started"
                time.sleep(0.1)
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=120)
        assert process.returncode == 130, err
        assert len(api.requests) == 1
    nb = nbformat.read(tmp_path / "run.ipynb", as_version=4)
    code = next(c for c in nb.cells if c.cell_type == "code")
    assert code.metadata.cellgate["status"] == "interrupted"
    assert nb.metadata.cellgate.agent["ended"]["reason"] == "interrupted"
    assert cellgate("verify", str(tmp_path / "run.ipynb")).returncode == 0
