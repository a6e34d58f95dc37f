"""The generated `tools` package: deterministic, real signatures, injection-proof."""

from __future__ import annotations

import ast

import pytest
from conftest import NORTHWIND

from cellgate.gate.calls import stubgen
from cellgate.gate.calls.registry import ToolRegistry


def northwind_files() -> dict[str, str]:
    return stubgen.generate(ToolRegistry.from_paths([NORTHWIND / "tools.py"]).manifest())


def test_generation_is_deterministic() -> None:
    assert northwind_files() == northwind_files()


def test_schema_and_signature_come_from_type_hints_and_docstring() -> None:
    registry = ToolRegistry.from_paths([NORTHWIND / "tools.py"])
    create = registry.get("create_task").manifest_entry()
    assert create["parameters"]["properties"]["kind"] == {
        "enum": ["follow_up", "refund", "escalate"], "type": "string", "description": "What the team should do."}
    assert create["parameters"]["required"] == ["order_id", "kind"]
    assert stubgen.signature(create) == "(order_id: str, kind: _t.Literal['follow_up', 'refund', 'escalate'])"
    assert create["description"] == "Open a task about an order for the support team."


def test_hostile_descriptions_cannot_inject_code() -> None:
    hostile = {
        "name": "innocent",
        "description": "'''\nimport os; os.system('id')\n'''\"\"\"\\",
        "parameters": {"type": "object", "properties": {"x": {"type": "string", "default": "')\nimport os#"}}},
    }
    files = stubgen.generate([hostile])
    tree = ast.parse(files["tools/__init__.py"])
    benign = stubgen.generate([{**hostile, "description": "", "parameters": {"type": "object"}}])
    assert imported_modules(tree) == imported_modules(ast.parse(benign["tools/__init__.py"]))
    assert "os" not in imported_modules(tree)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "innocent")
    assert ast.get_docstring(function).startswith("'''\nimport os")
    defaults = [d for d in function.args.defaults + function.args.kw_defaults if isinstance(d, ast.Constant)]
    assert [d.value for d in defaults] == ["')\nimport os#"]


def imported_modules(tree: ast.AST) -> set[str]:
    """Every module a generated file imports, from `import a.b` and `from a import b` alike."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


@pytest.mark.parametrize("name", ["1abc", "class", "a-b", "_private", "search", "a b"])
def test_bad_tool_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="rename"):
        stubgen.generate([{"name": name, "description": "", "parameters": {"type": "object"}}])


def test_optional_without_default_is_omitted_and_required_come_first() -> None:
    tool = {"name": "t", "parameters": {"type": "object", "required": ["b"],
                                         "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}}
    assert stubgen.signature(tool) == "(b: str, a: int = _runtime.OMIT)"
