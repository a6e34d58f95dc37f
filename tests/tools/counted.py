"""A side-effecting tool that counts its executions in a file, so a test can prove
no call ran twice (even across a host crash)."""

from __future__ import annotations

import os


def charge(amount: int) -> str:
    """Charge an amount (appends one line per execution to $CELLGATE_TEST_COUNT_FILE)."""
    with open(os.environ["CELLGATE_TEST_COUNT_FILE"], "a") as ledger:
        ledger.write(f"{amount}\n")
    return f"charged {amount}"


def ledger(rows: int) -> list[dict[str, int]]:
    """A large result (stored as a blob); counted like charge."""
    with open(os.environ["CELLGATE_TEST_COUNT_FILE"], "a") as ledger_file:
        ledger_file.write("ledger\n")
    return [{"row": n, "amount": n * 3} for n in range(rows)]
