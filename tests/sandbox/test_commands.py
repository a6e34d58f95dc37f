"""``Session.run_command`` in the real sandbox: a cell of kind ``command``, recorded with its argv and exit code."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import cellgate

from cellgate.gate import CommandResult, SessionError
from cellgate.gate.session.commands import command_code
from cellgate.gate.testing import BlockingSession


def run(box: BlockingSession, argv: Any, timeout: float | None = None) -> CommandResult:
    return box._run(box.session.run_command(argv, timeout=timeout))


def text(value: Any) -> Any:
    return "".join(value) if isinstance(value, list) else value  # nbformat splits text into lines on disk


def cells(box: BlockingSession) -> list[dict[str, Any]]:
    return [c for c in json.loads(box.session.notebook_path.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.fixture(scope="module")
def commands(session_factory: Any) -> BlockingSession:
    return session_factory(tools=[], cell_timeout=60)


def test_a_shell_line_gives_its_output_and_exit_code_and_is_recorded_as_a_command(session_factory: Any) -> None:
    commands = session_factory(tools=[])
    result = run(commands, ["sh", "-c", "echo hi; echo oops >&2; exit 3"])
    assert (result.stdout, result.stderr, result.exit_code, result.status) == ("hi\n", "oops\n", 3, "ok")
    assert not result.ok
    cell = cells(commands)[-1]
    meta = cell["metadata"]["cellgate"]
    assert (meta["kind"], meta["argv"], meta["status"]) == ("command", ["sh", "-c", "echo hi; echo oops >&2; exit 3"],
                                                           "ok")
    assert "".join(cell["source"]) == "$ sh -c 'echo hi; echo oops >&2; exit 3'"  # not the generated Python
    outputs = [(o["output_type"], o.get("name"), text(o.get("text") or o.get("data", {}).get("text/plain")))
               for o in cell["outputs"]]
    assert outputs == [("stream", "stdout", "hi\n"), ("stream", "stderr", "oops\n"),
                       ("display_data", None, "exit code 3")]
    notebook = str(commands.session.notebook_path)
    commands.close()  # verify reads a finished run
    verified = cellgate("verify", notebook)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    shown = cellgate("show", notebook, "--cell", "1")
    assert shown.returncode == 0, shown.stderr
    assert "$ sh -c 'echo hi; echo oops >&2; exit 3'" in shown.stdout


def test_no_shell_runs_unless_argv_names_one(commands: BlockingSession) -> None:
    result = run(commands, ["echo", "$HOME;", "`id`", "*"])
    assert (result.stdout, result.exit_code) == ("$HOME; `id` *\n", 0)
    assert result.ok


def test_a_command_past_its_timeout_is_killed_with_what_it_printed(commands: BlockingSession) -> None:
    result = run(commands, ["sh", "-c", "echo started; exec sleep 120"], timeout=1)
    assert (result.status, result.exit_code, result.stdout) == ("timeout", -9, "started\n")
    assert cells(commands)[-1]["metadata"]["cellgate"]["error"]["ename"] == "CommandTimeout"
    assert run(commands, ["true"]).ok  # the kernel goes on


def test_a_missing_program_is_an_error_of_its_cell(commands: BlockingSession) -> None:
    result = run(commands, ["/no/such/program"])
    assert (result.status, result.exit_code) == ("error", -1)
    assert cells(commands)[-1]["metadata"]["cellgate"]["error"]["ename"] == "FileNotFoundError"


@pytest.mark.parametrize(("argv", "says"), [
    ("echo hi", "list of strings"), ([], "empty argv"), (["echo", 3], r"argv\[1\] is int"),
    (["echo", "a\0b"], "NUL"),
])
def test_bad_argv_is_refused_before_anything_runs(commands: BlockingSession, argv: Any, says: str) -> None:
    before = len(cells(commands))
    with pytest.raises(SessionError, match=says):
        run(commands, argv)
    assert len(cells(commands)) == before


def test_a_timeout_past_the_cell_timeout_is_refused(commands: BlockingSession) -> None:
    with pytest.raises(SessionError, match="cell_timeout = 60"):
        run(commands, ["true"], timeout=61)


def test_a_cell_sending_the_generated_code_itself_is_recorded_as_the_code_it_is(commands: BlockingSession) -> None:
    result = commands.execute(command_code(["echo", "forged"], None))
    assert result.stdout == "forged\n"
    meta = cells(commands)[-1]["metadata"]["cellgate"]
    assert "kind" not in meta and "argv" not in meta  # only the session's own run_command makes a command cell


def test_output_past_the_cell_limit_is_bounded_like_any_cell(session_factory: Any) -> None:
    box = session_factory(tools=[], output_limit_kb=64)
    result = run(box, ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; echo; exit 5"])
    assert result.exit_code == 5
    assert len(result.stdout) < 200_000
    assert "output" in cells(box)[-1]["metadata"]["cellgate"]["limits_hit"]
