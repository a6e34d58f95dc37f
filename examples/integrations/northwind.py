"""The Northwind tools (examples/northwind/tools.py), imported on the host for the framework examples."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "cellgate.toml"
TASK = ("Of October 2026's orders, find those that went by NorthPost more than five days late and open a "
        "follow_up task for each; answer with the number of orders and the number of late ones.")


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("northwind_tools", HERE.parent / "northwind" / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its annotations are strings: resolved in its own namespace
    spec.loader.exec_module(module)
    return module


tools = sys.modules.get("northwind_tools") or _load()
list_orders = tools.list_orders
create_task = tools.create_task
