"""The generated `tools` package: deterministic, real signatures, injection-proof."""

from __future__ import annotations

import ast
import inspect
import random

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


def test_people_read_annotations_as_typing_prints_them() -> None:
    tool = {"name": "export", "parameters": {"type": "object", "required": ["form"], "properties": {
        "form": {"enum": ["raw_t.csv", "_t.Any"], "description": "Which file."},
        "rows": {"type": "array", "items": {}}, "limit": {"type": "integer"}}}}
    assert stubgen.signature(tool) == "(form: _t.Literal['raw_t.csv', '_t.Any'], rows: list[_t.Any] = _runtime.OMIT, " \
                                      "limit: int = _runtime.OMIT)"
    shown = "(form: Literal['raw_t.csv', '_t.Any'], rows: list[Any] = OMIT, limit: int = OMIT)"
    assert stubgen.signature(tool, shown=True) == shown
    files = stubgen.generate([tool])
    assert f"_SIGNATURES = {{'export': {shown!r}}}" in files["tools/__init__.py"]  # values keep their `_t.`
    assert "form (Literal['raw_t.csv', '_t.Any']): Which file." in files["tools/__init__.py"]


HOSTILE_TEXTS = [
    "", "plain", '"""', "'''", '"', '\\', 'ends with a quote"', "ends with a backslash\\", '\\"""\n"""', "a\n\n\nb",
    "\n\nleading and trailing\n\n", "tab\there\r\ncrlf\rcr", "form\x0cfeed\x0bvtab\x1cfs\x00nul", "line\u2028sep\u2029par",
    "\x85next line", "emoji 🎉 and ünïcödé", "    indented\n        more", "'\"'\"'\"", '"""; import os; """',
]


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_docstring_literals_have_real_lines_and_give_back_the_text(text: str) -> None:
    assert ast.literal_eval(stubgen.docstring_literal(text, indent="")) == exact(text)
    literal = stubgen.docstring_literal(text)
    assert inspect.cleandoc(ast.literal_eval(literal)) == inspect.cleandoc(text)
    assert literal.count("\n") == (text.count("\n") + 1 if "\n" in text else 0)  # real line breaks, one per line
    function = ast.parse(f"def f():\n    {literal}\n    return 1\n").body[0]
    assert isinstance(function, ast.FunctionDef) and len(function.body) == 2  # the literal is one statement


def test_docstrings_are_random_text_proof() -> None:
    """Deterministic fuzz over the characters that matter to a string literal."""
    rng = random.Random(15)
    alphabet = ['"', "'", "\\", "\n", "\r", "\t", " ", "x", "\x00", "\u2028", "N", "{", "}", "u", "0"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert ast.literal_eval(stubgen.docstring_literal(text, indent="")) == exact(text), repr(text)


def exact(text: str) -> str:
    """What a docstring literal without indentation holds: a text of several lines ends with a line break."""
    return text + "\n" if "\n" in text else text
