"""Budgets that belong to a lineage: a session and every fork, trial and pool member made from it.

A lineage is a ledger in the host's private state (``lineages/<id>.json`` beside the host key, in its 0700
folder: never a folder a sandbox can write), so a fork, a kept trial, a ``Pool.from_session`` member and a
session resumed in another process all draw on the same counts. ``take`` checks and counts under an exclusive
lock (``flock`` on ``<id>.lock``) and writes the ledger whole (a new file renamed over the old), so two processes
never both spend the last call, and a crash leaves the old counts or the new ones, never none.

A member with a share (``Session.fork(n, budget=...)``) may make at most that many calls, still counted against
the lineage's totals; a share is never larger than what its parent has left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cellgate.gate import _hostkey as hostkey

ID = re.compile(r"^[0-9a-f]{16,64}$")
SHARE = "session"  # the name a member's share counts: its calls (max_calls_per_session)
MAX_LEDGER_BYTES = 4 << 20
LINEAGE_EVENT = "gate-lineage"  # the journal record naming a session's lineage (``record()``)


class BudgetRefused(Exception):  # noqa: N818 - a refusal, not a failure
    """A lineage's budget (or a member's share of it) is used up."""

    def __init__(self, name: str, limit: int, count: int, what: str, lineage: str) -> None:
        self.name, self.limit, self.count, self.what, self.lineage = name, limit, count, what, lineage
        super().__init__(f"{what} budget of {limit} calls is used up ({count} made, across lineage {lineage}: "
                         "this session, its forks, trials and resumed sessions)")


def folder() -> Path:
    """Where the ledgers are: the host key's own folder (the operator's, 0700), ``lineages/``."""
    return hostkey.default_path().parent / "lineages"


def _open_private(path: Path, flags: int) -> int:
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(f"{path} is not a regular file of this user; the lineage ledger is not used")
    return fd


@dataclass(frozen=True)
class Lineage:
    """One lineage's ledger, as one member sees it: ``shares`` are the members (this one last) whose caps its
    calls count against too."""

    id: str
    shares: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not ID.match(self.id) or not all(ID.match(s) for s in self.shares):
            raise ValueError(f"not a lineage id: {self.id!r}")

    @classmethod
    def new(cls) -> Lineage:
        return cls(secrets.token_hex(16))

    @classmethod
    def from_record(cls, record: Any) -> Lineage | None:
        """A lineage as a checkpoint manifest names it (``record()``); None when it names none."""
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            return None
        return cls(record["id"], tuple(str(s) for s in record.get("shares") or ()))

    @classmethod
    def journalled(cls, records: Iterable[dict[str, Any]]) -> Lineage | None:
        """The lineage a session's journal names last (a record read back: checked like any other), or None."""
        named = None
        for record in records:
            if record.get("event") == LINEAGE_EVENT:
                with contextlib.suppress(ValueError):
                    named = cls.from_record(record.get("lineage")) or named
        return named

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "shares": list(self.shares)}

    @property
    def path(self) -> Path:
        return folder() / f"{self.id}.json"

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The ledger, read under its lock; what the block leaves in it is written back whole."""
        home = folder()
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(home)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise OSError(f"{home} is not a folder of this user's alone; the lineage ledgers are not kept there")
        lock = _open_private(home / f"{self.id}.lock", os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                fd = _open_private(self.path, os.O_RDONLY)
            except FileNotFoundError:
                data: dict[str, Any] = {"held": {}, "shares": {}}
            else:
                with os.fdopen(fd, "rb") as file:
                    data = json.loads(file.read(MAX_LEDGER_BYTES))
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                new = home / f".{self.id}.{secrets.token_hex(4)}.tmp"
                out = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                with os.fdopen(out, "w") as file:
                    file.write(json.dumps(data, sort_keys=True))
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(new, self.path)
        finally:
            os.close(lock)

    def take(self, name: str, limit: int | None, what: str = "") -> int:
        """Count one use of ``name`` (atomically, across processes); BudgetRefused when ``limit`` (None: no
        limit) or this member's share is used up. Returns the new count."""
        return self.take_all([(name, limit, what or name)])[name]

    def take_all(self, wanted: Iterable[tuple[str, int | None, str]]) -> dict[str, int]:
        """``take`` for several names at once: all counted, or none (BudgetRefused for the first used up)."""
        wanted = list(wanted)
        with self._locked() as data:
            held, shares = data.setdefault("held", {}), data.setdefault("shares", {})
            for name, limit, what in wanted:
                count = int(held.get(name, 0))
                if limit is not None and count >= limit:
                    raise BudgetRefused(name, limit, count, what, self.id)
                if name == SHARE:
                    for member in self.shares:
                        share = shares.get(member) or {"cap": 0, "used": 0}
                        if share["used"] >= share["cap"]:
                            raise BudgetRefused(name, share["cap"], share["used"], f"this fork's share of the {what}",
                                                self.id)
            for name, _limit, _what in wanted:
                held[name] = int(held.get(name, 0)) + 1
                if name == SHARE:
                    for member in self.shares:
                        shares[member]["used"] += 1
            return {name: held[name] for name, _limit, _what in wanted}

    def held(self) -> dict[str, int]:
        """Every count of the lineage: name -> uses."""
        with self._locked() as data:
            return {str(k): int(v) for k, v in data.get("held", {}).items()}

    def raise_to(self, counts: dict[str, int]) -> None:
        """Counts at least these (a session resumed from a record older than its ledger)."""
        with self._locked() as data:
            held = data.setdefault("held", {})
            for name, count in counts.items():
                held[name] = max(int(held.get(name, 0)), int(count))

    def left(self, limit: int | None) -> int | None:
        """How many calls this member may still make (``limit``: max_calls_per_session; None: no bound)."""
        with self._locked() as data:
            bounds = [] if limit is None else [limit - int(data.get("held", {}).get(SHARE, 0))]
            for member in self.shares:
                share = data.get("shares", {}).get(member) or {"cap": 0, "used": 0}
                bounds.append(share["cap"] - share["used"])
            return max(0, min(bounds)) if bounds else None

    def share(self, budget: int | None, limit: int | None) -> Lineage:
        """A member for a fork: the same lineage, with a share of ``budget`` calls when given; ValueError when
        ``budget`` is more than this member has left."""
        if budget is None:
            return self
        if budget < 0:
            raise ValueError(f"a fork's budget must be 0 or more calls, got {budget}")
        left = self.left(limit)
        if left is not None and budget > left:
            raise ValueError(f"a fork's budget of {budget} calls is more than its parent has left ({left} of "
                             f"lineage {self.id}); a fork may get a smaller share, never a larger one")
        member = secrets.token_hex(8)
        with self._locked() as data:
            data.setdefault("shares", {})[member] = {"cap": budget, "used": 0}
        return Lineage(self.id, (*self.shares, member))


def lineage_of(session: Any) -> Lineage:
    """The lineage a running session's gate draws on."""
    return session.provisioner.gate.lineage  # type: ignore[no-any-return]


__all__ = ["BudgetRefused", "Lineage", "folder", "lineage_of"]
