"""Session(tools=[...]) taken apart: paths, the program's callables and Tools, and what each is allowed."""

from __future__ import annotations

import dataclasses
import types

import pytest

from cellgate.gate import ConfigError, Session, Tool, tool_from_function
from cellgate.gate.calls import program


def lookup(key: str) -> str:
    """The value under key."""
    return key


def test_callables_are_allowed_and_a_stated_decision_is_kept() -> None:
    module = types.ModuleType("northwind_like")
    exec("def count(n: int) -> int:\n    return n\n", module.__dict__)
    paths, tools = program.split(["tools.py", lookup, tool_from_function(lookup, name="ask_me", decision="ask"),
                                  dataclasses.replace(tool_from_function(lookup, name="never"), decision="deny"),
                                  module], "Session(tools=...)")
    assert paths == ["tools.py"]
    assert [(t.name, t.default_decision, t.source) for t in tools] == [
        ("lookup", "allow", "program"), ("ask_me", "approve", "program"), ("never", "deny", "program"),
        ("count", "allow", "northwind_like")]


def test_a_session_given_callables_opens_them_as_a_source() -> None:
    session = Session(tools=[lookup, "tools.py"])
    assert session.launch_options.tools == ("tools.py",)
    (source,) = session.launch_options.sources
    assert [t.name for t in source.open()] == ["lookup"]


def test_bad_tools_say_what_to_pass() -> None:
    with pytest.raises(ConfigError, match=r"Session\(tools=\.\.\.\): item 0 is 42 \(int\); pass a function, a Tool"):
        Session(tools=[42])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="decision 'maybe' is not one of 'allow', 'deny', 'ask'"):
        Tool("x", "", {"type": "object"}, lookup, decision="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="has no __name__"):
        tool_from_function(type("Callable", (), {"__call__": lambda self: 1})())
