"""The Anthropic agent loop on cellgate (``cellgate run``), on the official ``anthropic`` SDK.

Lazy like the gate's face: its command and config section are found through
entry points on every ``cellgate`` start, so importing the package must not
import the SDK or the Session.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import AgentSettings
    from .loop import AgentLoop, AgentRun
    from .prompt import EXECUTE_PYTHON, system_prompt

_FACE = {
    "AgentLoop": ".loop",
    "AgentRun": ".loop",
    "AgentSettings": ".config",
    "EXECUTE_PYTHON": ".prompt",
    "system_prompt": ".prompt",
}

__all__ = ["EXECUTE_PYTHON", "AgentLoop", "AgentRun", "AgentSettings", "system_prompt"]


def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
