"""One call path: a tool call from code in the sandbox and the same call made directly are recorded alike.

The same calls go once through the relay (a program in a real gVisor kernel
calls them, one per cell) and once as the model's direct tool use
(``Session.call_tool``), each in a fresh session under the same policy. Their
journal records must agree on everything the call path decides (arguments
with defaults filled in, argument digest, decision and rule, approval,
result and its digest, error, budget counters) and on the events around them
(an intent before each tool runs); only ids, times and the kernel's own claims
(line, thread) may differ.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate import Session

pytestmark = pytest.mark.gvisor

SAMPLE_TOOLS = Path(__file__).resolve().parents[1] / "tools" / "sample_tools.py"

POLICY = f'''
[tools]
modules = ["{SAMPLE_TOOLS}"]

[policy]
default = "allow"
approver = "allow"

[policy.tools.add]
decision = "approve"

[[policy.tools.add.rules]]
name = "small sums are routine"
when = {{ properties = {{ a = {{ maximum = 9 }} }} }}
decision = "allow"

[policy.tools.big]
decision = "deny"
'''

# (tool, arguments): allowed by a rule with a default filled in, approved by the approver, invalid,
# denied by policy, allowed by default, and a tool that raises.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("add", {"a": 2}),
    ("add", {"a": 20, "b": 3}),
    ("add", {"a": "two"}),
    ("big", {"kib": 1}),
    ("echo", {"text": "hi"}),
    ("explode", {"reason": "x"}),
]

# What may differ between the two paths: ids, times, and what the kernel claims about the calling code.
PER_PATH = {"id", "started", "duration_ms", "idempotency_key", "claimed"}
APPROVAL_TIMES = {"requested", "answered"}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "cellgate.toml"
    path.write_text(POLICY)
    return path


def journal(notebook: Path) -> list[dict[str, Any]]:
    path = notebook.with_name(notebook.stem + ".journal.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def call_events(entries: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each call event with the call as the path decided it (per-path fields removed)."""
    found = []
    for entry in entries:
        if entry["event"] in ("call-started", "call-finished"):
            call = {k: v for k, v in entry["call"].items() if k not in PER_PATH}
            if "approval" in call:
                call["approval"] = {k: v for k, v in call["approval"].items() if k not in APPROVAL_TIMES}
            found.append((entry["event"], call))
    return found


def cell_kinds(entries: list[dict[str, Any]]) -> list[str]:
    return [entry.get("kind", "code") for entry in entries if entry["event"] == "cell-sent"]


def python_call(tool: str, args: dict[str, Any]) -> str:
    return f"tools.{tool}(" + ", ".join(f"{name}={value!r}" for name, value in args.items()) + ")"


async def both_paths(config: Path, folder: Path) -> tuple[list[dict[str, Any]], list[Any], list[dict[str, Any]]]:
    """(journal of the calls made from code, outcomes and journal of the same calls made directly)."""
    async with Session(config=config, notebook=folder / "relay.ipynb", cwd=folder) as relay:
        for tool, args in CALLS:
            result = await relay.execute(f"try:\n    {python_call(tool, args)}\nexcept Exception as e:\n"
                                         "    print(type(e).__name__)")
            assert result.ok, result.text
    async with Session(config=config, notebook=folder / "direct.ipynb", cwd=folder) as direct:
        outcomes = [await direct.call_tool(tool, args) for tool, args in CALLS]
    return journal(folder / "relay.ipynb"), outcomes, journal(folder / "direct.ipynb")


def test_relay_and_direct_calls_take_one_path(runsc: object, config: Path, tmp_path: Path) -> None:
    from_code, outcomes, from_model = asyncio.run(asyncio.wait_for(both_paths(config, tmp_path), 600))

    assert cell_kinds(from_code) == ["code"] * len(CALLS)
    assert cell_kinds(from_model) == ["direct"] * len(CALLS)
    assert [(o.ok, o.error_name if o.error else None) for o in outcomes] == [
        (True, None), (True, None), (False, "ToolValidationError"), (False, "ToolDenied"), (True, None),
        (False, "ToolError")]
    relayed, served = call_events(from_code), call_events(from_model)
    # Every path the policy can take was taken: the comparison below covers each of them.
    finished = [call for event, call in served if event == "call-finished"]
    assert [call["decision"] for call in finished] == ["allow", "approved", "invalid", "deny", "allow", "allow"]
    assert finished[0]["args"] == {"a": 2, "b": 1}  # the schema's default, filled in on the one path
    assert [event for event, _ in served] == ["call-started", "call-finished", "call-started", "call-finished",
                                              "call-finished", "call-finished", "call-started", "call-finished",
                                              "call-started", "call-finished"]
    assert relayed == served
