"""langgraph-codeact's CodeAct agent with its scripts in cellgate's sandbox (docs: integrations/langgraph).

    pip install 'cellgate[langgraph-codeact]' langchain-anthropic
    python examples/integrations/codeact_agent.py         # Claude (ANTHROPIC_API_KEY)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph_codeact import create_codeact
from northwind import CONFIG, TASK, create_task, list_orders

from cellgate.extensions.langgraph import CodeActEval
from cellgate.gate import SyncSession


def run(model: Any, notebook: Path | None = None) -> tuple[str, Path]:
    """The agent's last message for the Northwind task, and the audit notebook of its session."""
    tools = [list_orders, create_task]
    with SyncSession(tools=tools, config=CONFIG, notebook=notebook) as box:
        agent = create_codeact(model, tools, eval_fn=CodeActEval(box)).compile()
        state = agent.invoke({"messages": [{"role": "user", "content": TASK}]})
        return str(state["messages"][-1].content), box.notebook_path


if __name__ == "__main__":
    from langchain_anthropic import ChatAnthropic

    answer, notebook = run(ChatAnthropic(model="claude-sonnet-4-5"))
    print(answer)
    print(f"audit notebook: {notebook}")
