"""The `cellgate` command line as a user runs it."""

from __future__ import annotations

from pathlib import Path

import nbformat
from conftest import NORTHWIND, cellgate

run = cellgate


def test_northwind_example(tmp_path: Path, runsc: object) -> None:
    out = tmp_path / "out.ipynb"
    done = run("exec", str(NORTHWIND / "late_orders.py"), "--tools", str(NORTHWIND / "tools.py"),
               "--notebook", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "10000 312\n"
    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    (cell,) = [c for c in nb.cells if c.cell_type == "code"]
    calls = cell.metadata.cellgate.calls
    assert len(calls) == 313
    assert calls[0]["tool"] == "list_orders" and {c["tool"] for c in calls[1:]} == {"create_task"}
    assert [c["seq"] for c in calls] == sorted(c["seq"] for c in calls)
    sandbox = nb.metadata.cellgate.sandbox
    assert sandbox.runtime == "gvisor" and sandbox.runsc_version and sandbox.platform in ("systrap", "ptrace")
    assert cell.source == (NORTHWIND / "late_orders.py").read_text()


def test_exec_several_programs_share_state_and_fail_nonzero(tmp_path: Path, runsc: object) -> None:
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("value = 20\n")
    second.write_text("print(value * 2)\nraise RuntimeError('second cell fails')\n")
    done = run("exec", str(first), str(second), "--notebook", str(tmp_path / "nb.ipynb"))
    assert done.returncode == 1
    assert done.stdout == "40\n"
    assert "RuntimeError: second cell fails" in done.stderr
    nb = nbformat.read(tmp_path / "nb.ipynb", as_version=4)
    assert [c.metadata.cellgate.status for c in nb.cells] == ["ok", "error"]


def test_exec_reads_stdin_and_config_file(tmp_path: Path, runsc: object) -> None:
    (tmp_path / "cellgate.toml").write_text(
        f'[tools]\nmodules = ["{NORTHWIND / "tools.py"}"]\n\n[audit]\ndir = "runs"\n\n'
        '[policy.tools.list_orders]\ndecision = "allow"\n')
    done = run("exec", "-", stdin="print(len(tools.list_orders('2026-09')))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "10000\n"
    assert len(list((tmp_path / "runs").glob("*.ipynb"))) == 1


def test_doctor_passes(runsc: object) -> None:
    done = run("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all checks passed" in done.stdout
    assert "a cell ran in gVisor and called a gated tool" in done.stdout
