"""What a new user hit at the command line and in the sandbox (issue 29, item 8)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import CELLGATE, cellgate


def test_version_is_printed() -> None:
    done = cellgate("--version", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cellgate ") and done.stdout.split()[1][0].isdigit(), done.stdout


def test_a_config_that_is_not_a_file_says_what_it_is() -> None:
    done = cellgate("exec", "--config", "/dev/null", "-", stdin="print(1)", timeout=60)
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert "config file '/dev/null' is a device, not a cellgate.toml file (an empty file gives every default)" \
        in message, message
    assert "does not exist" not in message


def test_show_json_into_a_closed_pipe_is_quiet(tmp_path: Path, runsc: object) -> None:
    notebook = tmp_path / "run.ipynb"
    assert cellgate("exec", "-", "--notebook", str(notebook), stdin="print(1)").returncode == 0
    # `cellgate show --json | head -1`, the reader gone before show writes: its write meets a closed pipe.
    show = subprocess.Popen([*CELLGATE, "show", "--json", str(notebook)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert show.stdout is not None and show.stderr is not None
    show.stdout.close()
    with show.stderr:
        errors = show.stderr.read().decode()
    assert show.wait(timeout=120) == 141, errors  # as a program SIGPIPE ended exits
    assert "BrokenPipeError" not in errors and "Traceback" not in errors, errors


def test_fontconfig_finds_its_configuration_in_the_sandbox(tmp_path: Path, runsc: object) -> None:
    program = ("import subprocess\n"
               "found = subprocess.run(['fc-match', 'sans-serif'], capture_output=True, text=True)\n"
               "print(found.returncode, found.stdout.strip())\nprint('stderr:', repr(found.stderr.strip()))")
    done = cellgate("exec", "-", "--notebook", str(tmp_path / "fonts.ipynb"), stdin=program)
    assert done.returncode == 0, done.stderr
    matched, stderr = done.stdout.splitlines()
    assert stderr == "stderr: ''", stderr  # no "Fontconfig error: Cannot load default config file"
    assert matched.startswith("0 ") and ".ttf" in matched, matched  # a font of the host's /usr/share/fonts
