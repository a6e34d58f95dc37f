"""Northwind's tools: an order ledger and a task queue, run on the host.

The ledger is generated deterministically (seeded), so every run of the
example sees the same 10,000 orders for a month.
"""

from __future__ import annotations

import itertools
import random
import threading
from typing import Literal

SEED = 4  # chosen so October 2026 has 312 NorthPost orders more than five days late
CARRIERS = ("NorthPost", "SwiftShip", "ParcelCo", "BlueLine")
ORDERS_PER_MONTH = 10_000

_task_ids = itertools.count(1)
_tasks: list[dict[str, object]] = []
_lock = threading.Lock()


def list_orders(month: str) -> list[dict[str, object]]:
    """All orders placed in a month, with their carrier and how many days late they arrived.

    Args:
        month: The month as YYYY-MM, e.g. 2026-10.
    """
    year, _, mon = month.partition("-")
    if not (year.isdigit() and mon.isdigit() and len(year) == 4 and 1 <= int(mon) <= 12):
        raise ValueError(f"month must look like 2026-10, got {month!r}")
    rng = random.Random(f"northwind:{month}:{SEED}")
    orders = []
    for n in range(ORDERS_PER_MONTH):
        late = rng.random() < 0.2
        orders.append({
            "order_id": f"{year}{mon}-{n:05d}",
            "day": rng.randint(1, 28),
            "carrier": rng.choice(CARRIERS),
            "days_late": rng.randint(1, 14) if late else 0,
            "amount": round(rng.uniform(5, 500), 2),
        })
    return orders


def create_task(order_id: str, kind: Literal["follow_up", "refund", "escalate"]) -> dict[str, object]:
    """Open a task about an order for the support team.

    Args:
        order_id: The order the task is about.
        kind: What the team should do.
    """
    with _lock:
        task = {"task_id": next(_task_ids), "order_id": order_id, "kind": kind}
        _tasks.append(task)
    return task
