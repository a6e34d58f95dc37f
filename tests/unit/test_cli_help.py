"""The command line's help (issue 43, item 9): every command, the extensions' too, opens its ``--help`` with a
description and is listed with a line of help; every argument has help; an argument's choices are shown; an
error's usage line lists every command. Walks the parser itself, so a command added without help fails here."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from cellgate.gate.ops.cli import parser
from cellgate.gate.sandbox.backends import installed_backends


def commands(top: argparse.ArgumentParser, path: tuple[str, ...] = ("cellgate",)) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, listed.get(name)
                yield from commands(sub, (*path, name))


ALL = list(commands(parser()))


def test_the_walk_finds_every_command_the_extensions_included() -> None:
    names = {" ".join(path[1:]) for path, _, _ in ALL}
    assert {"exec", "install", "doctor", "verify", "report", "show", "recover", "replay", "mcp serve", "run",
            "image build", "approvals list", "policy check"} <= names


@pytest.mark.parametrize(("path", "sub", "listed"), ALL, ids=[" ".join(p[1:]) for p, _, _ in ALL])
def test_every_command_and_argument_says_what_it_is(path: tuple[str, ...], sub: argparse.ArgumentParser,
                                                      listed: str | None) -> None:
    assert listed, f"{' '.join(path)} is listed without a line of help"
    assert sub.description, f"`{' '.join(path)} --help` opens with no description"
    for action in sub._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{' '.join(path)} {name} has no help"
        if action.choices is not None and action.metavar is not None:  # argparse shows them only without metavar
            missing = [c for c in action.choices if str(c) not in action.help]
            assert not missing, f"{' '.join(path)} {name}: its help does not name the choices {missing}"
    assert sub.format_help()


@pytest.mark.parametrize("command", ["exec", "install", "doctor", "verify", "report", "recover", "replay"])
def test_the_main_commands_have_a_description_of_their_own(command: str) -> None:
    [(_, sub, listed)] = [c for c in ALL if c[0] == ("cellgate", command)]
    assert listed and sub.description and not sub.description.startswith(listed[:1].upper() + listed[1:])


def test_the_help_says_what_exec_and_doctor_do() -> None:
    [(_, exec_, _)] = [c for c in ALL if c[0] == ("cellgate", "exec")]
    assert "stops at the first program that fails" in exec_.description
    assert "exec goes on with the next program" in exec_.description
    [(_, doctor, _)] = [c for c in ALL if c[0] == ("cellgate", "doctor")]
    helps = {a.dest: a.help or "" for a in doctor._actions}
    assert "runsc" in helps["fix"] and "image" in helps["fix"]
    for backend in installed_backends():  # --backend takes a registered name: its help names them
        assert backend in helps["backend"]


def test_idle_timeout_and_idle_pause_are_told_apart() -> None:
    [(_, serve, _)] = [c for c in ALL if c[0] == ("cellgate", "mcp", "serve")]
    said = next(a.help for a in serve._actions if a.dest == "idle_timeout")
    assert "idle_pause" in said and "ends" in said and "pauses" in said


def test_the_usage_after_an_argument_error_lists_the_extensions_commands(cli) -> None:
    done = cli("exec", "p.py", "--no-such-option")
    assert done.returncode == 2
    usage = done.stderr.split("error:")[0]
    assert "mcp" in usage and "run" in usage and "exec" in usage, done.stderr
