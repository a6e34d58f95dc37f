"""Tools for the test suite: each one exercises a path through the gate."""

from __future__ import annotations

import time

CALLS: dict[str, int] = {}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


def echo(text: str) -> str:
    """Return text unchanged.

    Args:
        text: Anything.
    """
    _count("echo")
    return text


def add(a: int, b: int = 1) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    _count("add")
    return a + b


def explode(reason: str) -> None:
    """Always fails, with reason as the message."""
    _count("explode")
    raise ValueError(reason)


def slow(seconds: float) -> str:
    """Sleep on the host, then answer."""
    _count("slow")
    time.sleep(seconds)
    return "done"


def big(kib: int) -> str:
    """A string of kib KiB."""
    _count("big")
    return "x" * (kib * 1024)


def fetch_invoice(invoice_id: str, api_key: str) -> dict[str, object]:
    """Look up an invoice with a credential the operator passes in (a secret argument)."""
    _count("fetch_invoice")
    if invoice_id == "broken":
        raise PermissionError(
            f"GET https://billing.example/v1/invoices/{invoice_id} failed with 401; "
            f"Authorization: Bearer {api_key}; config /home/operator/.billing/credentials.toml")
    return {"invoice_id": invoice_id, "total": 42}


def issue_token(user: str) -> dict[str, object]:
    """A result with a value the tool marks secret: the cell gets it, the audit trail only its digest."""
    from cellgate.gate import Secret

    _count("issue_token")
    return {"user": user, "token": Secret(f"tok-{user}-s3cr3t-value")}
