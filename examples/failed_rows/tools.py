"""A payments table of 10,000 rows, run on the host: the top-failed-rows task."""

from __future__ import annotations

import random

ROWS = 10_000
STATUSES = ("settled", "settled", "settled", "pending", "failed")


def query_table(table: str) -> list[dict[str, object]]:
    """Every row of a table.

    Args:
        table: The table's name; this example has "payments".
    """
    if table != "payments":
        raise ValueError(f"no table {table!r}; the tables are: payments")
    rng = random.Random("payments:7")
    return [{"id": f"pay-{n:05d}", "status": rng.choice(STATUSES), "amount": round(rng.uniform(1, 5000), 2),
             "customer": f"cus-{rng.randint(1, 800):04d}"} for n in range(ROWS)]
