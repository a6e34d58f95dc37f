"""What the model is offered and what it sees of a cell (pure functions, no sandbox)."""

from __future__ import annotations

from cellgate.extensions.anthropic.prompt import api_name, direct_definitions, split_tools, system_prompt
from cellgate.extensions.anthropic.view import trim


def entry(name: str, description: str = "Does a thing.") -> dict[str, object]:
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}


def test_small_tool_sets_are_listed_and_large_ones_point_at_search() -> None:
    few = [entry("lookup"), entry("crm.create_task", "Open a task.\n\nMore detail.")]
    listed = system_prompt(few, [], search_threshold=5)
    assert "- tools.lookup(x: str): Does a thing." in listed
    assert "- tools.crm.create_task(x: str): Open a task." in listed and "More detail" not in listed
    many = [entry(f"t{n}") for n in range(6)]
    pointed = system_prompt(many, [], search_threshold=5)
    assert "There are 6 tools" in pointed and "tools.search(" in pointed and "tools.t0" not in pointed


def test_modes_split_the_tools_by_their_exposure() -> None:
    manifest = [entry("read"), entry("write"), entry("both")]
    exposure = {"write": "direct", "both": "both"}
    assert [[e["name"] for e in part] for part in split_tools(manifest, exposure, "code")] == [["read", "both"], []]
    assert [[e["name"] for e in part] for part in split_tools(manifest, exposure, "direct")] == [
        [], ["read", "write", "both"]]
    assert [[e["name"] for e in part] for part in split_tools(manifest, exposure, "hybrid")] == [
        ["read", "both"], ["write", "both"]]


def test_direct_tools_get_names_the_api_accepts() -> None:
    assert api_name("crm.create_task") == "crm__create_task"
    [definition] = direct_definitions([entry("crm.create_task")])
    assert definition["name"] == "crm__create_task" and definition["input_schema"]["required"] == ["x"]


def test_trim_keeps_head_and_tail_and_says_what_was_dropped() -> None:
    text = "H" * 1000 + "T" * 1000
    out = trim(text, 300, "the notebook")
    assert out.startswith("H" * 200) and out.endswith("T" * 100)
    assert "1,700 characters dropped" in out
    assert trim("short", 300, "x") == "short"
