"""The agent loop (`cellgate run`) through the real `anthropic` SDK against the local fake Messages API.

Every program runs in the real gVisor sandbox; the fake API only stands in
for the model, answering from a script (cellgate.extensions.anthropic.testing).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import nbformat
import pytest

from cellgate.extensions.anthropic import AgentLoop, AgentRun
from cellgate.extensions.anthropic.config import AgentSettings
from cellgate.extensions.anthropic.testing import APIFailure, FakeMessagesAPI, estimate_tokens, reply, text, tool_use
from cellgate.gate import Session
from cellgate.gate.audit.journal import read_journal
from cellgate.gate.audit.recorder import journal_path
from cellgate.gate.testing import normalize_notebook

pytestmark = pytest.mark.gvisor

TOOLS = Path(__file__).parent / "tools"
SAMPLE = TOOLS / "sample_tools.py"
COUNTED = TOOLS / "counted.py"
CELLGATE = [sys.executable, "-m", "cellgate.gate.ops.cli"]
GOLDEN = Path(__file__).parent / "snapshots" / "agent_code_mode.json"
# A 1x1 PNG, for the image path.
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def run_agent(tmp_path: Path, script: list[Any], config: str | None = None, tools: tuple[Path, ...] = (SAMPLE,),
              **settings: Any) -> tuple[AgentRun, list[dict[str, Any]], Path]:
    config_path = None
    if config is not None:
        config_path = tmp_path / "cellgate.toml"
        config_path.write_text(config)
    notebook = tmp_path / "run.ipynb"

    async def go() -> tuple[AgentRun, list[dict[str, Any]]]:
        with FakeMessagesAPI(script) as api:
            client = anthropic.AsyncAnthropic(api_key="test-key", base_url=api.url, max_retries=2)
            async with Session(config=config_path, tools=list(tools), notebook=notebook, cwd=tmp_path) as session:
                run = await AgentLoop(session, client, AgentSettings(model="claude-test", **settings)).run("the task")
            return run, api.requests

    run, requests = asyncio.run(go())
    return run, requests, notebook


def results_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks the loop sent back in a request."""
    return [b for b in request["messages"][-1]["content"] if b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in block["content"])


def echo_last_result(prefix: str) -> Any:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return reply(text(prefix + " " + result_text(results_of(body)[0]).strip()))
    return answer


def cellgate(*args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CELLGATE, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, **kwargs)


def test_code_mode_runs_each_program_as_a_cell_and_records_the_turns(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    count = tmp_path / "count"
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(count))
    program = "rows = tools.ledger(50)\nprint(sum(r['amount'] for r in rows), tools.charge(7))"
    script = [
        APIFailure(529),  # overloaded once: the SDK's own retry handles it
        reply(text("I will total the ledger."), tool_use("execute_python", {"code": program})),
        echo_last_result("The total and receipt:"),
    ]
    run, requests, notebook = run_agent(tmp_path, script, tools=(COUNTED,))
    assert (run.ended, run.turns, run.requests) == ("end_turn", 2, 2)
    assert len(requests) == 3  # the failed attempt, then two turns
    assert [t["name"] for t in requests[1]["tools"]] == ["execute_python"]
    assert "- tools.charge(amount: int): Charge an amount" in requests[1]["system"]
    [result] = results_of(requests[2])
    assert result["is_error"] is False and result_text(result) == "3675 charged 7\n"
    assert run.final_text == "The total and receipt: 3675 charged 7"

    nb = nbformat.read(notebook, as_version=4)
    assert [(c.cell_type, c.metadata.cellgate.get("kind")) for c in nb.cells] == [
        ("markdown", "task"), ("markdown", "model"), ("code", None), ("markdown", "model")]
    assert nb.cells[1].source == "I will total the ledger."
    assert nb.cells[2].source == program
    assert [c["tool"] for c in nb.cells[2].metadata.cellgate.calls] == ["ledger", "charge"]
    agent = nb.metadata.cellgate.agent
    assert (agent["model"], agent["mode"], agent["ended"]["reason"]) == ("claude-test", "code", "end_turn")
    # Per-turn usage is what the API reported (the fake's estimate of each request), summed.
    reported = [estimate_tokens(body) for body in requests[1:]]
    assert [t["usage"]["input_tokens"] for t in agent["turns"]] == reported
    assert agent["usage"]["input_tokens"] == sum(reported) == run.usage["input_tokens"]
    assert nb.cells[1].metadata.cellgate["usage"]["input_tokens"] == reported[0]
    # The whole notebook, run-specific values normalized, against the golden one (regenerate with
    # CELLGATE_UPDATE_SNAPSHOTS=1 and review the diff).
    normalized = json.dumps(normalize_notebook(nb), indent=1, sort_keys=True) + "\n"
    if os.environ.get("CELLGATE_UPDATE_SNAPSHOTS") == "1":
        GOLDEN.write_text(normalized)
        pytest.fail(f"wrote {GOLDEN.name}; review `git diff tests/snapshots`, then rerun without "
                    "CELLGATE_UPDATE_SNAPSHOTS (a run that writes the golden notebook never passes)")
    assert normalized == GOLDEN.read_text()

    assert cellgate("verify", str(notebook)).returncode == 0
    shown = cellgate("show", str(notebook), env={"COLUMNS": "200"})
    assert f"2 turns, ended end_turn; tokens in {sum(reported):,}" in shown.stdout
    count.write_text("")
    replayed = cellgate("replay", str(notebook))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert replayed.stdout.splitlines()[0] == "cell 1: recorded ok, replayed ok"
    assert "live calls: 0" in replayed.stdout and count.read_text() == ""


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
    assert [c.metadata.cellgate.calls[0]["decision"] for c in direct] == ["allow", "deny", "deny", "allow"]
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
