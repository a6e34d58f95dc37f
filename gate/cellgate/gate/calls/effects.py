"""What a tool does to the world: ``read``, ``write`` (the default) or ``idempotent`` (a write safe to repeat).

The effect decides what a retry does with a call (``calls.writes``): a read
always runs again; a write already committed is answered from the record; a
write of unknown outcome runs again only under the same idempotency key, and
an idempotent write simply runs again. It never loosens a decision: the policy
decides a read as it decides any call.

Where it is said, strongest first: ``[policy.tools.NAME] effect``; the tool's
own code (``@Tool.with_effect("read")`` or a ``__cellgate_effect__``
attribute); an MCP server's annotations (``readOnlyHint``, ``idempotentHint``:
a server's word, shown as such, that the policy overrides); else ``write``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_args

from cellgate.gate._errors import ConfigError

Effect = Literal["read", "write", "idempotent"]
EFFECTS: tuple[str, ...] = get_args(Effect)
DEFAULT: Effect = "write"
ATTRIBUTE = "__cellgate_effect__"
# One line each, as the stubs' docstrings and `cellgate tools` say it.
MEANING: dict[str, str] = {
    "read": "changes nothing; a retry runs it again",
    "write": "changes the world; a retry answers it from the record and never repeats it",
    "idempotent": "a write that is safe to repeat; a retry runs it again",
}
F = TypeVar("F", bound=Callable[..., Any])


def checked(value: object, where: str) -> Effect:
    """``value`` as an effect; ConfigError naming ``where`` otherwise."""
    if value not in EFFECTS:
        raise ConfigError(f"{where}: effect {value!r} is not one of {', '.join(map(repr, EFFECTS))}; "
                          f"say what the tool does: 'read' (changes nothing), 'write' or 'idempotent'")
    return value  # type: ignore[return-value]


def marking(kind: Effect) -> Callable[[F], F]:
    """Mark a tool function's effect: ``@Tool.with_effect("read")`` above ``def list_orders(...)``."""
    checked(kind, "Tool.with_effect")

    def mark(function: F) -> F:
        setattr(function, ATTRIBUTE, kind)
        return function

    return mark


def declared(function: Callable[..., Any], where: str) -> Effect | None:
    """The effect a tool's code states (``effect`` or the attribute), or None."""
    value = getattr(function, ATTRIBUTE, None)
    return None if value is None else checked(value, where)


def resolve(policy_effect: str | None, tool_effect: str | None, tool_says: str) -> tuple[Effect, str]:
    """The effect a call has and who said it: the policy, else the tool's source, else the default."""
    if policy_effect is not None:
        return checked(policy_effect, "[policy.tools] effect"), "policy"
    if tool_effect is not None:
        return checked(tool_effect, "tool"), tool_says
    return DEFAULT, "default"
