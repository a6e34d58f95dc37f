"""The Anthropic agent loop on cellgate (``cellgate run``), on the official ``anthropic`` SDK."""

from .loop import AgentLoop, AgentRun
from .prompt import EXECUTE_PYTHON, system_prompt

__all__ = ["EXECUTE_PYTHON", "AgentLoop", "AgentRun", "system_prompt"]
