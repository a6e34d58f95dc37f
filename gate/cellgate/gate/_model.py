"""The strict pydantic base of every settings model, and pydantic errors as readable problems."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Unknown keys are errors and values are frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def validation_problems(exc: ValidationError,
                        where: Callable[[Sequence[Any]], str] = lambda loc: "") -> list[str]:
    """One line per problem: the key path, the value given and what is wrong, or how to fix an unknown key.

    ``where(loc)`` may give a prefix such as ``file:line`` for the key path ``loc``."""
    problems = []
    for error in exc.errors():
        loc = [p for p in error["loc"] if not str(p).startswith("function-")]
        key = ".".join(str(p) for p in loc)
        at = where(loc)
        prefix = f"{at}: " if at else ""
        if error["type"] == "extra_forbidden":
            problems.append(f"{prefix}unknown key {key!r}: remove it or check its spelling")
        else:
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{prefix}{key} = {error.get('input')!r}: {message}")
    return problems
