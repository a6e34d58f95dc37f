"""The strict pydantic base of every settings model, and pydantic errors as readable problems."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Unknown keys are errors and values are frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (itself, optional, or the values of a mapping or list of it), if one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in reversed(typing.get_args(annotation)):  # dict[str, Model]: the values' type is last
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def field_names_at(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The keys the model accepts in the table at key path ``loc`` ([] where that is not known)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        field = current.model_fields.get(str(part))
        if field is None:  # a mapping's key or a list's index: the model of its values goes on
            continue
        current = _model_in(field.annotation)
    return [] if current is None else [field.alias or name for name, field in current.model_fields.items()]


def suggestion(model: type[BaseModel] | None, loc: Sequence[Any]) -> str:
    """'; did you mean 'memory_mb'?' for an unknown key close to one the model has, else ''."""
    if model is None or not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), field_names_at(model, loc[:-1]), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def validation_problems(exc: ValidationError, where: Callable[[Sequence[Any]], str] = lambda loc: "",
                        model: type[BaseModel] | None = None) -> list[str]:
    """One line per problem: the key path, the value given and what is wrong, or how to fix an unknown key.

    ``where(loc)`` may give a prefix such as ``file:line`` for the key path ``loc``; ``model``, the model that was
    validated, lets an unknown key suggest the nearest key it has (``sandbox.memory``: ``memory_mb``)."""
    problems = []
    for error in exc.errors():
        loc = [p for p in error["loc"] if not str(p).startswith("function-")]
        key = ".".join(str(p) for p in loc)
        at = where(loc)
        prefix = f"{at}: " if at else ""
        if error["type"] == "extra_forbidden":
            problems.append(f"{prefix}unknown key {key!r}: remove it or check its spelling{suggestion(model, loc)}")
        else:
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{prefix}{key} = {error.get('input')!r}: {message}")
    return problems
