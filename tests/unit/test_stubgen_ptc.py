"""tools.ptc: each tool as `async def name(args: dict) -> str` (JSON text), over the same runtime call."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate import ConfigError
from cellgate.gate.calls import stubgen
from cellgate.gate.calls.registry import ToolRegistry, tool_from_function
from cellgate.kernel import runtime
from cellgate.kernel.errors import ToolValidationError


def list_orders(month: str) -> list[dict[str, object]]:
    """Orders of a month."""
    return []


def note(text: str) -> str:
    """A note."""
    return text


@pytest.fixture()
def tools_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    manifest = ToolRegistry([tool_from_function(list_orders), tool_from_function(note)]).manifest()
    for name, text in stubgen.generate(manifest, "ptc").items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    calls: list[tuple[str, dict[str, Any]]] = []

    async def acall(tool: str, params: dict[str, Any]) -> Any:
        calls.append((tool, params))
        return "plain text" if tool == "note" else [{"order_id": "1", "amount": 2.5}]

    monkeypatch.setattr(runtime, "acall", acall)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "tools" or n.startswith("tools.")]:
        monkeypatch.delitem(sys.modules, name)
    tools = importlib.import_module("tools")
    yield tools, calls
    for name in [n for n in sys.modules if n == "tools" or n.startswith("tools.")]:
        del sys.modules[name]


def test_ptc_functions_take_one_dict_and_give_json_text(tools_package: Any) -> None:
    tools, calls = tools_package
    assert tools.__cellgate_call_style__ == "ptc" and tools.ptc.__all__ == ["list_orders", "note"]
    assert asyncio.run(tools.ptc.list_orders({"month": "2026-10"})) == '[{"order_id": "1", "amount": 2.5}]'
    assert asyncio.run(tools.ptc.note({"text": "x"})) == "plain text"  # a str result as it is
    assert calls == [("list_orders", {"month": "2026-10"}), ("note", {"text": "x"})]
    with pytest.raises(ToolValidationError, match=r"takes one dict of arguments in this call style, not str"):
        asyncio.run(tools.ptc.list_orders("2026-10"))


def test_the_default_style_says_nothing_and_a_bad_style_is_refused() -> None:
    assert "__cellgate_call_style__" not in stubgen.generate([])["tools/__init__.py"]
    with pytest.raises(ConfigError, match="call_style 'js' is not one of module, ptc"):
        stubgen.generate([], "js")
