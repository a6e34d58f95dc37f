"""``cellgate run --scripted FILE``: a model that says what a TOML file says, to try the loop offline.

Each ``[[turn]]`` of the file is one model turn: ``code`` (a program for ``execute_python``), ``text`` (what
the model says), or both; the last turn is text only, the model's answer. The turns are served by
``FakeMessagesAPI`` (the tests' fake of the Messages API) on loopback, so the real SDK, the sandbox, the
gate and the audit notebook all run as they do against the API; only the model is a script, which does not
read what the programs print.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from cellgate.gate import ConfigError
from cellgate.gate.ext import StrictModel

from .testing import reply, text, tool_use

__all__ = ["read_script"]


class Turn(StrictModel):
    """One ``[[turn]]``: what the scripted model says and the program it runs."""

    text: str | None = Field(default=None, description="what the model says")
    code: str | None = Field(default=None, description="a program the model runs with execute_python")

    @model_validator(mode="after")
    def _says_something(self) -> Turn:
        if not (self.text or self.code):
            raise ValueError("give text, code or both")
        return self


class Script(StrictModel):
    turn: list[Turn] = Field(min_length=1)


def read_script(path: Path) -> list[dict[str, Any]]:
    """The file's turns as the fake API's replies; a ConfigError naming the file and the fix otherwise."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--scripted {str(path)!r}: cannot read it ({exc.strerror or exc}); give a TOML file "
                          "of [[turn]] tables (examples/northwind/scripted.toml)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--scripted {str(path)!r} is not valid TOML: {exc}") from None
    try:
        turns = Script.model_validate(data).turn
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors())
        raise ConfigError(f"--scripted {str(path)!r}: {problems} (see examples/northwind/scripted.toml)") from None
    if turns[-1].code is not None:
        raise ConfigError(f"--scripted {str(path)!r}: the last [[turn]] has code; end with a turn of text only "
                          "(the model's answer), or the loop would ask the script for a turn it does not have")
    return [_reply(n, turn) for n, turn in enumerate(turns, 1)]


def _reply(number: int, turn: Turn) -> dict[str, Any]:
    blocks = [text(turn.text)] if turn.text else []
    if turn.code is not None:
        blocks.append(tool_use("execute_python", {"code": turn.code}, f"toolu_scripted_{number}"))
    return reply(*blocks)


def _problem(error: Any) -> str:
    loc = list(error["loc"])
    where, keys = "the file", loc
    if len(loc) >= 2 and loc[0] == "turn" and isinstance(loc[1], int):
        where, keys = f"[[turn]] {loc[1] + 1}", loc[2:]
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown key {str(keys[-1])!r} (a [[turn]] has text, code or both)"
    if error["type"] == "missing" and keys == ["turn"]:
        return "the file has no [[turn]]"
    key = "".join(f" {k}" for k in keys)
    return f"{where}{key}: {error['msg'].removeprefix('Value error, ')}"
