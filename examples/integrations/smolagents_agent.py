"""smolagents' CodeAgent with its code in cellgate's sandbox (docs: integrations/smolagents).

    pip install 'cellgate[smolagents]'
    python examples/integrations/smolagents_agent.py      # a model from the Hugging Face Inference API (HF_TOKEN)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from northwind import CONFIG, TASK, create_task, list_orders
from smolagents import CodeAgent, tool

from cellgate.extensions.smolagents import CellgateExecutor


def run(model: Any, notebook: Path | None = None) -> tuple[Any, Path]:
    """The agent's answer to the Northwind task, and the audit notebook of its session."""
    executor = CellgateExecutor(config=CONFIG, notebook=notebook)  # the sandbox starts at agent.run
    agent = CodeAgent(tools=[tool(list_orders), tool(create_task)], model=model, executor=executor, max_steps=6)
    try:
        answer = agent.run(TASK)
        return answer, executor.session.notebook_path
    finally:
        agent.cleanup()  # closes the session: the notebook is complete


if __name__ == "__main__":
    from smolagents import InferenceClientModel

    answer, notebook = run(InferenceClientModel())
    print(answer)
    print(f"audit notebook: {notebook}")
