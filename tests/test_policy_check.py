"""`cellgate policy check`: the effective table for a good file; a clear error for bad ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import NORTHWIND


def check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cellgate.gate.ops.cli", "policy", "check", str(path)],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, timeout=60)


def test_northwind_policy_table() -> None:
    done = check(NORTHWIND / "cellgate.toml")
    assert done.returncode == 0, done.stderr
    rows = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if line.startswith("│")}
    assert "approve" in rows["create_task"] and "follow-ups are routine" in rows["create_task"]
    assert "allow" in rows["list_orders"] and "20/s" in rows["list_orders"]
    assert "max_calls_per_session=1000" in done.stdout and "approver=queue" in done.stdout


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
    done = check(path)
    assert done.returncode == 2
    assert expected in " ".join(done.stderr.split()), done.stderr


def test_policy_naming_an_unknown_tool_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cellgate.toml"
    path.write_text(f'[tools]\nmodules = ["{NORTHWIND / "tools.py"}"]\n\n[policy.tools.list_ordrs]\ndecision = "allow"\n')
    done = check(path)
    assert done.returncode == 2 and "names tools that are not configured: list_ordrs" in done.stderr
