"""What the frameworks' tests share (not a conftest: a second `conftest` module would shadow tests/conftest.py for
every `from conftest import`): the Northwind task, its host tools, its policy, and how to read the record back.

Each framework gets the example's two tools (examples/northwind/tools.py, imported on the host) and the example's
policy (list_orders allowed, create_task allowed for follow-ups) or that policy with create_task denied; the
program in examples/northwind/late_orders.py prints the answer, ``10000 312``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat

NORTHWIND = Path(__file__).resolve().parents[2] / "examples" / "northwind"
ANSWER = "10000 312"
LATE = 312
PROGRAM = "\n".join(line for line in (NORTHWIND / "late_orders.py").read_text().splitlines()
                    if not line.startswith("#"))
# In the frameworks' prompts the tools are top-level functions, not tools.<name>.
PLAIN_PROGRAM = PROGRAM.replace("tools.", "")

POLICY = """
[policy]
default = "deny"
approver = "deny"

[policy.tools.list_orders]
decision = "allow"

[policy.tools.create_task]
decision = "approve"

[[policy.tools.create_task.rules]]
name = "follow-ups are routine"
when = { properties = { kind = { const = "follow_up" } }, required = ["kind"] }
decision = "allow"
"""
DENY_TASKS = """
[policy]
default = "deny"
approver = "deny"

[policy.tools.list_orders]
decision = "allow"

[policy.tools.create_task]
decision = "deny"
"""


def write_config(folder: Path, policy: str) -> Path:
    """A cellgate.toml with no tool modules (the framework hands its tools over) and the given policy."""
    path = folder / "cellgate.toml"
    path.write_text(f'[audit]\ndir = "{folder / "runs"}"\n{policy}')
    return path


def session_options(tmp_path: Path, policy: str = POLICY) -> dict[str, Any]:
    return {"config": write_config(tmp_path, policy), "notebook": tmp_path / "run.ipynb", "cwd": tmp_path}


def gated_calls(notebook: Path) -> list[tuple[str, str, int]]:
    """Every gated call in the audit notebook: (tool, decision, how many times), read with nbformat."""
    calls = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        for call in cell.metadata.get("cellgate", {}).get("calls", []):
            calls.append((call["tool"], call["decision"], int(call.get("repeated", 1))))
    return calls


def tally(notebook: Path) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for tool, decision, times in gated_calls(notebook):
        counts[tool, decision] = counts.get((tool, decision), 0) + times
    return counts
