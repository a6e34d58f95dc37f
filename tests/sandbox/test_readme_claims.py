"""README claims about the sandbox and frontends that had no test of their own, each checked in gVisor:
one file is capped at `workspace_mb` (EFBIG); history is never a file; a restart with changed tools starts a new
notebook naming the previous one; inspection replies are sanitized."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import cellgate
from jupyter_client import KernelManager

WORKSPACE_MB = 64


@pytest.fixture(scope="module")
def box(session_factory: Any) -> Any:
    return session_factory(workspace_mb=WORKSPACE_MB)


def run_json(box: Any, code: str) -> Any:
    result = box.execute(code + "\nimport json as _j\nprint(_j.dumps(out))")
    assert result.ok, result.text
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_one_file_is_capped_at_workspace_mb(box: Any) -> None:
    """README, Host-backed writable folders: "One file is also capped at `workspace_mb` (`RLIMIT_FSIZE`, `EFBIG`)".
    A sparse write at the cap's last byte costs no space; one byte past it is EFBIG, in /workspace and anywhere."""
    limit = WORKSPACE_MB
    out = run_json(box, f'''
import errno, os, resource
out = {{"rlimit": resource.getrlimit(resource.RLIMIT_FSIZE)[0]}}
for folder in ("/workspace", "/tmp"):
    for offset in ({limit} << 20) - 1, {limit} << 20:
        path = os.path.join(folder, f"big-{{offset}}")
        try:
            with open(path, "wb") as f:
                f.seek(offset)
                f.write(b"x")
            out[path] = os.path.getsize(path)
        except OSError as e:
            out[path] = errno.errorcode[e.errno]
        finally:
            if os.path.exists(path):
                os.remove(path)
''')
    assert out["rlimit"] == limit << 20
    for folder in ("/workspace", "/tmp"):
        assert out[f"{folder}/big-{(limit << 20) - 1}"] == limit << 20  # up to the cap: written
        assert out[f"{folder}/big-{limit << 20}"] == "EFBIG"  # one byte past it: refused


def test_history_is_in_the_kernel_s_memory_never_a_file(box: Any) -> None:
    """README, Speed: "History is IPython's, kept in the kernel's memory (never a file)" (the local backend's
    kernel command line). The control: the history holds the cells run, so it is kept, only not on disk."""
    assert box.execute("first = 'a cell for the history'").ok
    out = run_json(box, '''
import os
hm = get_ipython().history_manager
out = {"file": str(hm.hist_file), "enabled": hm.enabled,
       "kept": [source for _, _, source in hm.get_range(raw=True, output=False)], "found": [], "errors": []}
for root, dirs, files in os.walk("/", onerror=lambda e: out["errors"].append(e.filename)):
    if root.startswith(("/proc", "/sys", "/dev")):
        dirs[:] = []
        continue
    out["found"] += [os.path.join(root, f) for f in files if f.endswith(("sqlite", "sqlite-journal", "sqlite-wal"))]
''')
    assert out["file"] == ":memory:" and out["enabled"] is True
    assert "first = 'a cell for the history'" in out["kept"], out["kept"]
    assert out["found"] == [] and "/" not in out["errors"], out


# ------------------------------------------------------------------ a frontend's kernel (the kernelspec)

TOOLS_BEFORE = '''
def first() -> str:
    """The tool the kernel started with."""
    return "first"
'''
TOOLS_AFTER = TOOLS_BEFORE + '''

def second() -> str:
    """A tool added before the restart."""
    return "second"
'''


@pytest.fixture()
def frontend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runsc: object) -> Iterator[Any]:
    """A kernel started as any frontend starts it (the kernelspec as `cellgate install --prefix` writes it)."""
    done = cellgate("install", "--prefix", str(tmp_path / "prefix"), check=True)
    assert "installed kernelspec 'cellgate'" in done.stdout
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "prefix" / "share" / "jupyter"))
    (tmp_path / "frontend_tools.py").write_text(TOOLS_BEFORE)
    config = tmp_path / "cellgate.toml"
    config.write_text('[tools]\nmodules = ["frontend_tools.py"]\n\n[audit]\ndir = "audit"\n\n'
                      '[policy]\ndefault = "allow"\n')
    monkeypatch.setenv("CELLGATE_CONFIG", str(config))
    km = KernelManager(kernel_name="cellgate")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        yield km, kc, tmp_path
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=False)


def stdout_of(kc: Any, code: str) -> str:
    text: list[str] = []
    reply = kc.execute_interactive(code, timeout=120, output_hook=lambda m: text.append(
        m["content"]["text"]) if m["msg_type"] == "stream" and m["content"]["name"] == "stdout" else None)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(text)


def test_a_restart_with_changed_tools_starts_a_new_notebook_naming_the_previous_one(frontend: Any) -> None:
    """README, Use it from any Jupyter frontend: "a restart continues the same audit notebook ... (a new notebook
    naming the previous one if the tools, policy or sandbox settings changed in between)"."""
    km, kc, folder = frontend
    assert stdout_of(kc, "print(tools.first())") == "first\n"
    km.restart_kernel(now=False)  # unchanged: the same notebook goes on
    kc.wait_for_ready(timeout=120)
    assert stdout_of(kc, "print(tools.first(), 'again')") == "first again\n"
    (first,) = sorted((folder / "audit").glob("*.ipynb"))
    (folder / "frontend_tools.py").write_text(TOOLS_AFTER)
    km.restart_kernel(now=False)
    kc.wait_for_ready(timeout=120)
    assert stdout_of(kc, "print(tools.second())") == "second\n"
    kc.stop_channels()
    km.shutdown_kernel(now=False)
    notebooks = sorted((folder / "audit").glob("*.ipynb"))
    assert len(notebooks) == 2 and first in notebooks, notebooks
    (second,) = [n for n in notebooks if n != first]
    old, new = (nbformat.read(n, as_version=4) for n in (first, second))
    assert [c.source for c in old.cells if c.cell_type == "code"] == ["print(tools.first())",
                                                                      "print(tools.first(), 'again')"]
    assert [c.source for c in new.cells if c.cell_type == "code"] == ["print(tools.second())"]
    link = new.metadata.cellgate.previous_notebook
    assert link["path"] == str(first) and link["restart"] == "frontend", link
    assert link["not_continued"] == "the session's setup changed: tools (the record's: first; now: first, second)", link
    assert "previous_notebook" not in old.metadata.cellgate


INSPECTOR = '''
def hostile_inspect(code, cursor_pos, detail_level=0, omit_sections=()):
    return {"status": "ok", "found": True, "metadata": {}, "data": {
        "text/plain": "the inspector's own text",
        "text/html": "<img src=x onerror=alert(1)><script>alert(2)</script><b>kept</b>",
        "application/javascript": "alert(3)"}}
get_ipython().kernel.do_inspect = hostile_inspect
print(sorted(hostile_inspect("", 0)["data"]))
'''


def test_inspection_replies_are_sanitized(frontend: Any) -> None:
    """README, Outputs are sanitized: "The same applies to ... inspection replies". The kernel answers a frontend's
    inspect_request (Shift-Tab in JupyterLab) with script; the frontend gets it inert."""
    _, kc, _ = frontend
    # The control: the kernel's inspector does send the script (what the frontend would get unsanitized).
    assert stdout_of(kc, INSPECTOR) == "['application/javascript', 'text/html', 'text/plain']\n"
    reply = kc.inspect("len", 3, reply=True, timeout=60)
    data = reply["content"]["data"]
    assert data["text/plain"].startswith("the inspector's own text"), data  # the hostile reply, not a default one
    assert "application/javascript" not in data and "alert(3)" not in json.dumps(data), data
    assert "onerror" not in data["text/html"] and "<script" not in data["text/html"], data["text/html"]
    assert "<b>kept</b>" in data["text/html"]
