"""An MCP server written for the tests: a small CRM over stdio or streamable HTTP.

    python crm_server.py                 # stdio
    python crm_server.py --http PORT     # streamable HTTP at http://127.0.0.1:PORT/mcp

Its tools cover what cellgate must handle: typed results (outputSchema), a
read-only and a destructive tool (annotations), an error result (isError), and
a tool that kills the server (a server dying mid-session). Every executed
call is appended to $CRM_LOG when it is set, so tests can count side effects.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TypedDict

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("crm")


class Customer(TypedDict):
    customer_id: str
    name: str
    tier: str


class Task(TypedDict):
    task_id: int
    customer_id: str
    title: str


def _log(event: str, **data: object) -> None:
    if os.environ.get("CRM_LOG"):
        with open(os.environ["CRM_LOG"], "a") as log:
            log.write(json.dumps({"event": event, "pid": os.getpid(), **data}) + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup_customer(email: str) -> Customer:
    """Find a customer by email address."""
    _log("lookup_customer", email=email)
    return {"customer_id": "cus-0042", "name": "Ana Silva", "tier": "gold"}


@server.tool(name="create-task")
def create_task(customer_id: str, title: str) -> Task:
    """Open a task on a customer's record."""
    _log("create-task", customer_id=customer_id, title=title)
    return {"task_id": 7, "customer_id": customer_id, "title": title}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_customer(customer_id: str) -> str:
    """Delete a customer and everything on their record."""
    _log("delete_customer", customer_id=customer_id)
    return f"deleted {customer_id}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails; the result is an MCP error result (isError) with the reason."""
    raise ToolError(f"the CRM refused: {reason}")


@server.tool()
def crash() -> str:
    """Kills the server process in the middle of the call."""
    _log("crash")
    os._exit(3)


@server.tool()
def token_seen() -> str:
    """Whether the server got its credential ($CRM_TOKEN) from the host's configuration."""
    return "yes" if os.environ.get("CRM_TOKEN") else "no"


@server.tool()
def authorized(ctx: Context) -> str:
    """Whether the request carried the Authorization header the host configured (HTTP only)."""
    return "yes" if (ctx.headers or {}).get("authorization") == os.environ.get("CRM_EXPECTED_AUTH") else "no"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int)
    args = parser.parse_args()
    _log("started")
    if args.http:
        server.run("streamable-http", port=args.http)
    else:
        server.run()
