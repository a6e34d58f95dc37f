"""The counter-case of the token-economy benchmark: two small, dependent calls."""

from __future__ import annotations


def find_customer(email: str) -> dict[str, object]:
    """The customer with an email address.

    Args:
        email: The address, e.g. ana@acme.example.
    """
    return {"customer_id": "cus-0042", "name": "Ana Silva", "email": email}


def open_orders(customer_id: str) -> list[dict[str, object]]:
    """A customer's open orders.

    Args:
        customer_id: The customer, e.g. cus-0042.
    """
    return [{"order_id": "ord-981", "total": 120.5}, {"order_id": "ord-990", "total": 42.0}]
