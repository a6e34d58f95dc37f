"""The `cellgate` command line's refusals that need neither runsc nor a kernel: a missing runsc, bad options.

Its ``main`` runs in this process (the ``cli`` fixture); the kernel and sandbox tiers run the command itself."""

from __future__ import annotations

from pathlib import Path


def test_without_runsc_cellgate_refuses_to_run_code(cli, tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    marker = tmp_path / "ran"
    program.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    done = cli("exec", str(program), env={"CELLGATE_RUNSC": str(tmp_path / "no-runsc")})
    assert done.returncode == 3
    assert "runsc not found" in done.stderr and "cellgate doctor --fix" in done.stderr
    assert not marker.exists()


def test_doctor_fails_with_a_fix_when_runsc_is_absent(cli, tmp_path: Path) -> None:
    done = cli("doctor", env={"CELLGATE_RUNSC": str(tmp_path / "no-runsc")})
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "cellgate doctor --fix" in done.stdout


def test_bad_config_is_a_clear_error(cli, tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text("[sandbox]\nmemory_mb = 'lots'\nnetwork = 'host'\n")
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    done = cli("exec", str(program), cwd=tmp_path)
    assert done.returncode == 2
    assert "sandbox.memory_mb = 'lots'" in done.stderr
    assert "unknown key 'sandbox.network'" in done.stderr


def test_bad_command_line_option_is_a_clear_error(cli, tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    done = cli("exec", str(program), "--timeout", "-3", "--isolation", "none")
    assert done.returncode == 2
    assert "sandbox options: cell_timeout = -3.0: Input should be greater than 0" in done.stderr
