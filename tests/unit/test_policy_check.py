"""`cellgate policy check`: the effective table for a good file; a clear error for bad ones.

The table and the config errors are pure functions (``decision_table``, ``load_settings``), tested as such; one
test runs the command itself, end to end.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import NORTHWIND, cellgate

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.policy import decision_table
from cellgate.gate.calls.registry import ToolRegistry
from cellgate.gate.config import load_settings


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return cellgate("policy", "check", str(path), env={"COLUMNS": "200"}, timeout=60)


def test_northwind_decision_table() -> None:
    settings = load_settings(NORTHWIND / "cellgate.toml")
    registry = ToolRegistry.from_paths(settings.tool_paths())
    rows = {row["tool"]: row for row in decision_table(settings.policy, registry.names())}
    assert (rows["create_task"]["decision"], rows["create_task"]["known"]) == ("approve", "yes")
    assert rows["create_task"]["rules"].startswith("follow-ups are routine: ")
    assert rows["create_task"]["rules"].endswith(" -> allow")
    assert (rows["list_orders"]["decision"], rows["list_orders"]["rate"]) == ("allow", "20/s")
    assert all(row["decision"] == "deny" for name, row in rows.items() if name not in settings.policy.tools)
    assert (settings.policy.max_calls_per_session, settings.policy.approver) == (1000, "queue")


MALFORMED = {
    "typo in a tool key": (
        '[policy.tools.list_orders]\ndecison = "allow"\n',
        "cellgate.toml:2: unknown key 'policy.tools.list_orders.decison': remove it or check its spelling"),
    "decision not in the closed set": (
        '[policy]\ndefault = "maybe"\n',
        "cellgate.toml:2: policy.default = 'maybe': Input should be 'allow', 'deny' or 'approve'"),
    "rate that is not a rate": (
        '[policy.tools.list_orders]\nrate = "fast"\n',
        "cellgate.toml:2: policy.tools.list_orders.rate = 'fast': rate 'fast' must look like '20/s'"),
    "rule whose when is not a JSON Schema": (
        '[[policy.tools.create_task.rules]]\nwhen = { type = 12 }\ndecision = "allow"\n',
        "policy.tools.create_task.rules.0.when = {'type': 12}: 'when' is not a valid JSON Schema"),
    "negative budget": (
        '[policy]\nmax_calls_per_session = -5\n',
        "cellgate.toml:2: policy.max_calls_per_session = -5: Input should be greater than or equal to 0"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_policy_files_are_rejected_naming_the_key(tmp_path: Path, case: str) -> None:
    text, expected = MALFORMED[case]
    path = tmp_path / "cellgate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert expected in " ".join(str(raised.value).split())


def test_the_command_prints_the_table_and_refuses_a_policy_naming_an_unknown_tool(tmp_path: Path) -> None:
    config = (NORTHWIND / "cellgate.toml").read_text()
    assert 'modules = ["tools.py"]' in config
    path = tmp_path / "cellgate.toml"
    path.write_text(config.replace('modules = ["tools.py"]', f'modules = ["{NORTHWIND / "tools.py"}"]')
                    + '\n[policy.tools.list_ordrs]\ndecision = "allow"\n')
    done = check(path)
    rows = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("│")}
    assert "approve" in rows["create_task"] and "follow-ups are routine" in rows["create_task"], done.stdout
    assert "allow" in rows["list_orders"] and "20/s" in rows["list_orders"]
    assert "NOT A TOOL OF THIS CONFIG" in rows["list_ordrs"]
    assert "max_calls_per_session=1000" in done.stdout and "approver=queue" in done.stdout
    assert done.returncode == 2 and "names tools that are not configured: list_ordrs" in done.stderr
