"""add_tools on a running session: the kernel's `tools` gains the stubs mid-session, the record says so, verify passes."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from conftest import cellgate

from cellgate.gate import ConfigError, SyncSession, Tool

pytestmark = pytest.mark.gvisor


def lookup(key: str) -> str:
    """The value under key."""
    return f"value of {key}"


def double(x: int) -> int:
    """Twice x.

    Args:
        x: Any integer.
    """
    return 2 * x


def wipe(table: str) -> int:
    """Delete every row of table."""
    return 0


AFTER = """
print(kept, tools.double(21), "double" in tools.__all__, tools.aio.double.__name__, tools.search("twice"))
try:
    tools.wipe("orders")
except tools.ToolDenied:
    print("wipe denied")
print(await double({"x": 4}))
"""


def test_tools_added_mid_session_are_stubs_in_the_kernel_and_in_the_record(runsc: object, tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text('[tools]\ncall_style = "ptc"\n\n[policy]\ndefault = "deny"\n')
    with SyncSession(tools=[lookup], config=tmp_path / "cellgate.toml", notebook=tmp_path / "run.ipynb",
                     cwd=tmp_path) as box:
        before = box.execute("kept = tools.lookup('a')\ntry:\n    tools.double(1)\n"
                             "except tools.ToolNotFound:\n    print('no double yet')")
        assert before.stdout == "no double yet\n", before.text
        sha_before = box.session.recorder.metadata["tools"]["manifest_sha256"]
        box.add_tools(double, Tool.from_function(wipe, decision="deny"))
        assert [t["name"] for t in box.session.manifest] == ["double", "lookup", "wipe"]
        after = box.execute(AFTER)  # same kernel: `kept` is still there
        assert after.ok, after.text
        assert after.stdout == ("value of a 42 True double ['double: Twice x.']\nwipe denied\n8\n")
        assert [(c.tool, c.decision) for c in after.calls] == [("double", "allow"), ("wipe", "deny"),
                                                              ("double", "allow")]
        with pytest.raises(ConfigError, match="'lookup' is defined twice"):
            box.add_tools(lookup)
        assert [t["name"] for t in box.session.manifest] == ["double", "lookup", "wipe"]  # nothing changed
        box.restart()  # a new sandbox starts with the added tools' stubs
        assert box.execute("print(tools.double(5))").stdout == "10\n"
        path = box.notebook_path
    nb = nbformat.read(path, as_version=4)
    (note,) = [c for c in nb.cells if c.metadata.get("cellgate", {}).get("kind") == "tools-added"]
    assert note.cell_type == "markdown" and "double" in note.source and "wipe" in note.source
    assert note.metadata.cellgate["tools"] == ["double", "wipe"]
    sha_after = note.metadata.cellgate["manifest_sha256"]
    assert sha_after != sha_before and len(sha_after) == 64
    assert nb.metadata.cellgate["tools_added"] == [{"tools": ["double", "wipe"], "manifest_sha256": sha_after,
                                                    "seq": nb.metadata.cellgate["tools_added"][0]["seq"]}]
    sources = [c.source for c in nb.cells]
    install = next(i for i, s in enumerate(sources) if "cellgate.kernel.tool_update" in s)
    assert sources.index(note.source) < install < next(i for i, s in enumerate(sources) if "tools.double(21)" in s)
    done = cellgate("verify", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
