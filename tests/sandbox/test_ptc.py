"""A script in the style of Anthropic's programmatic tool calling runs unchanged: gated, recorded, 10000 312."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import NORTHWIND

from cellgate.gate import SyncSession

pytestmark = pytest.mark.gvisor

SCRIPT = NORTHWIND / "ptc_script.py"


def test_the_ptc_script_prints_the_counts_with_every_call_gated(runsc: object, tmp_path: Path) -> None:
    with SyncSession(config=NORTHWIND / "ptc.toml", notebook=tmp_path / "run.ipynb", cwd=NORTHWIND) as box:
        result = box.execute(SCRIPT.read_text())
        assert result.ok, result.text
        assert result.stdout == "10000 312\n"
        assert len(result.calls) == 313
        assert [c.tool for c in result.calls].count("create_task") == 312
        assert {(c.tool, c.decision, c.ok) for c in result.calls} == {("list_orders", "allow", True),
                                                                      ("create_task", "allow", True)}
        # The functions are the session's, not the user's: a restart does not report them as lost variables.
        names = box.execute("print(sorted(n for n in ('list_orders', 'create_task') if n in globals()))").stdout
        assert names == "['create_task', 'list_orders']\n"
        hidden = box.execute("print('list_orders' in get_ipython().user_ns_hidden)").stdout
        assert hidden == "True\n"
        wrong = box.execute("await list_orders('2026-10')")
    assert wrong.status == "error" and wrong.error is not None
    assert wrong.error["ename"] == "ToolValidationError"
    assert "takes one dict of arguments in this call style" in wrong.error["evalue"]


def test_tools_ptc_is_there_in_the_default_call_style_and_the_namespace_is_not_touched(
        runsc: object, tmp_path: Path) -> None:
    with SyncSession(config=NORTHWIND / "cellgate.toml", notebook=tmp_path / "run.ipynb", cwd=NORTHWIND) as box:
        assert box.execute("print('list_orders' in globals())").stdout == "False\n"
        result = box.execute("from tools.ptc import list_orders\n"
                             "import json\nprint(len(json.loads(await list_orders({'month': '2026-10'}))))")
    assert result.stdout == "10000\n", result.text
    assert json.dumps([c.tool for c in result.calls]) == '["list_orders"]'
