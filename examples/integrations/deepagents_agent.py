"""A deepagents agent whose files, shell and Python are cellgate's sandbox (docs: integrations/langgraph).

    pip install 'cellgate[deepagents]'
    python examples/integrations/deepagents_agent.py      # Claude (ANTHROPIC_API_KEY)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deepagents import create_deep_agent
from northwind import CONFIG, TASK, create_task, list_orders

from cellgate.extensions.langgraph import CellgateSandbox, python_tool
from cellgate.gate import SyncSession

PROMPT = ("Work in /workspace. The Python tool's kernel has the company's tools as `tools.list_orders(month)` and "
          "`tools.create_task(order_id, kind)`; print only the numbers you need.")


def run(model: Any, notebook: Path | None = None) -> tuple[str, Path]:
    """The agent's last message for the Northwind task, and the audit notebook of its session."""
    with SyncSession(tools=[list_orders, create_task], config=CONFIG, notebook=notebook) as box:
        agent = create_deep_agent(model=model, tools=[python_tool(box)], backend=CellgateSandbox(box),
                                  system_prompt=PROMPT)
        state = agent.invoke({"messages": [{"role": "user", "content": TASK}]})
        return str(state["messages"][-1].content), box.notebook_path


if __name__ == "__main__":
    from langchain_anthropic import ChatAnthropic

    answer, notebook = run(ChatAnthropic(model="claude-sonnet-4-5"))
    print(answer)
    print(f"audit notebook: {notebook}")
