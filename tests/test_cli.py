"""The `cellgate` command line as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import NORTHWIND

CELLGATE = [sys.executable, "-m", "cellgate.gate.ops.cli"]


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, stdin: str | None = None):
    return subprocess.run([*CELLGATE, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          cwd=cwd, input=stdin, timeout=300)


@pytest.mark.gvisor
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


@pytest.mark.gvisor
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


@pytest.mark.gvisor
def test_exec_reads_stdin_and_config_file(tmp_path: Path, runsc: object) -> None:
    (tmp_path / "cellgate.toml").write_text(
        f'[tools]\nmodules = ["{NORTHWIND / "tools.py"}"]\n\n[audit]\ndir = "runs"\n\n'
        '[policy.tools.list_orders]\ndecision = "allow"\n')
    done = run("exec", "-", stdin="print(len(tools.list_orders('2026-09')))", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "10000\n"
    assert len(list((tmp_path / "runs").glob("*.ipynb"))) == 1


def test_without_runsc_cellgate_refuses_to_run_code(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    marker = tmp_path / "ran"
    program.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    done = run("exec", str(program), env={"CELLGATE_RUNSC": str(tmp_path / "no-runsc")})
    assert done.returncode == 3
    assert "runsc not found" in done.stderr and "cellgate doctor --fix" in done.stderr
    assert not marker.exists()


def test_doctor_fails_with_a_fix_when_runsc_is_absent(tmp_path: Path) -> None:
    done = run("doctor", env={"CELLGATE_RUNSC": str(tmp_path / "no-runsc")})
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "cellgate doctor --fix" in done.stdout


@pytest.mark.gvisor
def test_doctor_passes(runsc: object) -> None:
    done = run("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all checks passed" in done.stdout
    assert "a cell ran in gVisor and called a gated tool" in done.stdout


def test_isolation_none_is_explicit_and_recorded(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print('unsandboxed')\n")
    done = run("exec", str(program), "--isolation", "none", "--notebook", str(tmp_path / "nb.ipynb"))
    assert done.returncode == 0, done.stderr
    assert "WITHOUT gVisor" in done.stderr
    nb = nbformat.read(tmp_path / "nb.ipynb", as_version=4)
    assert nb.metadata.cellgate.sandbox.isolation == "none"


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text("[sandbox]\nmemory_mb = 'lots'\nnetwork = 'host'\n")
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    done = run("exec", str(program), cwd=tmp_path)
    assert done.returncode == 2
    assert "sandbox.memory_mb = 'lots'" in done.stderr
    assert "unknown key 'sandbox.network'" in done.stderr


def test_bad_command_line_option_is_a_clear_error(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    done = run("exec", str(program), "--timeout", "-3", "--isolation", "none")
    assert done.returncode == 2
    assert "sandbox options: cell_timeout = -3.0: Input should be greater than 0" in done.stderr
