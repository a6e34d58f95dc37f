"""The writes bookkeeping's cost on the gated-call round trip (goal: at most 5 %), measured side by side.

    .venv/bin/python benchmarks/bookkeeping.py [--quick]     (or: benchmarks/run.py --only bookkeeping)

Every gated call gets an effect (``calls.effects``), an idempotency key derived from its lineage, chain, tool,
argument digest and occurrence (``calls.retry``: a sha256 over canonical JSON), and a look-up in a retry's record
of earlier attempts. The baseline is the same call path with those three replaced by constants, inside this
process only (``without_bookkeeping``; the gate's code is not changed): the key is a constant of the same length,
so the journal's records are the same size. What stays in the baseline: the ``plans`` checks (two attribute
tests) and the record's extra fields (``effect``, ``ran``), which are the record's shape, not a computation.

- in process: ``Dispatcher.serve`` of an async ``echo`` tool (run on the gate's loop: a blocking tool's hand-off to
  a thread costs ~0.1-1 ms here, and as much noise), recorded by a real ``Recorder`` whose journal records are built and MAC'd but kept in memory (``run.py``'s
  ``MemoryJournal``), and the lineage's budget ledger counted in memory (``LedgerInMemory``): no sandbox, no
  file, no fsync, so the bookkeeping's share is as large as it can be; and the bookkeeping's lines alone, timed
  against their constants in a loop (the difference per call, in microseconds: no noise of a round trip);
- in gVisor: the blocking gated call as a cell sees it (the ``calls`` section's), in one sandboxed session whose
  cells alternate between the two modes (the gate runs in this process, so the switch applies to it).

Modes alternate in blocks, each first every other block, so the machine's drift falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cellgate.gate import Session
from cellgate.gate.audit.journal import Journal
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.calls.lineage import Lineage
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.registry import Tool, ToolRegistry
from cellgate.gate.calls.retry import KEY_PREFIX, CellWrites

MODES = ("with", "without")
CONSTANT_KEY = KEY_PREFIX + "0" * 40  # as long as a derived key: the journal's records weigh the same
ECHO_TOOLS = '''
def order(block: int) -> tuple[str, ...]:
    """The modes in this block's order: each goes first every other block (what runs first pays the drift)."""
    return MODES if block % 2 else MODES[::-1]


async def echo(text: str) -> str:
    """Return text."""
    return text
'''
CALLS = (
    "import time\ntimes = []\n"
    "for i in range({calls}):\n    t = time.perf_counter(); tools.echo('x'); times.append(time.perf_counter() - t)\n"
    "print(' '.join(f'{{x * 1000:.4f}}' for x in times))")


@contextlib.contextmanager
def without_bookkeeping() -> Iterator[None]:
    """The call path with the effect, the key's derivation and the retry look-up replaced by constants."""
    saved = CellWrites.key, CellWrites.recorded, Tool.effective_effect, Policy.effect

    def key(self: CellWrites, lineage: str, tool: str, args_sha256: str) -> str:
        return CONSTANT_KEY

    def recorded(self: CellWrites, key: str) -> None:
        return None

    def effective_effect(self: Tool, policy_effect: str | None = None) -> tuple[str, str]:
        return "write", "default"

    def effect(self: Policy, tool: str) -> None:
        return None

    CellWrites.key, CellWrites.recorded = key, recorded  # type: ignore[method-assign]
    Tool.effective_effect, Policy.effect = effective_effect, effect  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        CellWrites.key, CellWrites.recorded, Tool.effective_effect, Policy.effect = saved  # type: ignore[method-assign]


@dataclass(frozen=True)
class LedgerInMemory(Lineage):
    """A lineage whose ledger is a dict: the same counting, without the flock and the fsync'd file of each call."""

    ledger: dict[str, Any] = field(default_factory=lambda: {"held": {}, "shares": {}}, compare=False)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        yield self.ledger


def mode(name: str) -> contextlib.AbstractContextManager[None]:
    return without_bookkeeping() if name == "without" else contextlib.nullcontext()


def order(block: int) -> tuple[str, ...]:
    """The modes in this block's order: each goes first every other block (what runs first pays the drift)."""
    return MODES if block % 2 else MODES[::-1]


async def echo(text: str) -> str:
    """Return text."""
    return text


async def in_process(folder: Path, calls: int, rounds: int, journal: Callable[[Path], Journal]) -> dict[str, list[float]]:
    """``Dispatcher.serve`` round trips (ms), ``calls`` per block, ``rounds`` blocks of each mode, alternating."""
    tool = Tool.from_function(echo)
    recorder = Recorder(folder / "bookkeeping.ipynb", {}, open_journal=journal)
    gate = Dispatcher(ToolRegistry([tool]), log=recorder)
    gate.lineage = LedgerInMemory(gate.lineage.id)
    ids = itertools.count()
    out: dict[str, list[float]] = {name: [] for name in MODES}
    try:
        for block in range(rounds + 1):  # the first round warms both modes up, untimed
            for name in order(block):
                cell = recorder.cell_sent(f"cell-{block}-{name}", "tools.echo('x')", False)
                recorder.cell_started(cell)
                gate.new_cell()
                scope = CallScope(cell=cell, msg_id=cell.msg_id, key=cell.msg_id, source=cell.source,
                                  writes=CellWrites(chain=cell.msg_id))  # as the cell queue gives each cell
                times = []
                with mode(name):
                    for _ in range(calls):
                        request = CallRequest(id=f"c{next(ids)}", tool="echo", args={"text": "x"})
                        t = time.perf_counter()
                        outcome = await gate.serve(request, scope)
                        times.append((time.perf_counter() - t) * 1000)
                        assert outcome.reply.ok, outcome.reply.error
                    assert (outcome.record.idempotency_key == CONSTANT_KEY) == (name == "without")
                recorder.cell_ended(cell, "ok", [], None)
                if block:
                    out[name] += times
    finally:
        gate.close()
        recorder.close()
    return out


def alone(batches: int, per_batch: int = 2000) -> list[float]:
    """The bookkeeping's lines of ``Dispatcher._decide_and_run`` (effect, key, look-up), less the same lines with
    the constants: microseconds per call, one sample per pair of batches."""
    tool = Tool.from_function(echo)
    policy, lineage, digest = Policy.model_validate({"default": "allow"}), Lineage.new().id, "0" * 64
    spent: dict[str, list[float]] = {name: [] for name in MODES}
    for batch in range(batches + 1):
        for name in order(batch):
            writes = CellWrites(chain=f"cell-{batch}")
            with mode(name):
                t = time.perf_counter()
                for _ in range(per_batch):
                    effect, _said = tool.effective_effect(policy.effect(tool.name))
                    key = writes.key(lineage, tool.name, digest)
                    recorded = writes.recorded(key) if effect != "read" else None
                spent[name].append((time.perf_counter() - t) / per_batch * 1e6)
            assert recorded is None
    return [real - constant for real, constant in zip(spent["with"][1:], spent["without"][1:], strict=True)]


async def in_gvisor(folder: Path, calls: int, rounds: int) -> dict[str, list[float]]:
    """Blocking gated calls as the cell times them (ms), one sandboxed session, cells alternating the two modes."""
    tools = folder / "bookkeeping_tools.py"
    tools.write_text(ECHO_TOOLS)
    out: dict[str, list[float]] = {name: [] for name in MODES}
    async with Session(tools=[tools], notebook=folder / "bookkeeping.ipynb", cwd=folder) as session:
        for block in range(rounds + 1):  # the first round warms both modes up, untimed
            for name in order(block):
                with mode(name):
                    result = await session.execute(CALLS.format(calls=calls))
                assert result.ok, result.text
                if block:
                    out[name] += [float(x) for x in result.stdout.split()]
    return out


async def bookkeeping(folder: Path, journal: Callable[[Path], Journal], quick: bool = False) -> dict[str, Any]:
    """The samples of the three measurements (``journal``: the in-memory journal ``run.py`` defines)."""
    (folder / "bookkeeping").mkdir()
    return {"process": await in_process(folder / "bookkeeping", 100, 40 if quick else 100, journal),
            "alone": alone(40 if quick else 100),
            "gvisor": await in_gvisor(folder, 200 if quick else 500, 3 if quick else 6)}


def rows(measured: dict[str, Any], row: Any) -> list[dict[str, Any]]:
    process, gvisor = measured["process"], measured["gvisor"]
    return [
        row("gated call in process (Dispatcher.serve), no bookkeeping", process["without"]),
        row("  in process, with the writes bookkeeping (goal <= 1.05)", process["with"], baseline=process["without"]),
        row("  the bookkeeping's lines alone, per call", measured["alone"], unit="us"),
        row("blocking gated call (gVisor), no bookkeeping", gvisor["without"]),
        row("  gVisor, with the writes bookkeeping (goal <= 1.05)", gvisor["with"], baseline=gvisor["without"]),
    ]


if __name__ == "__main__":
    from run import MemoryJournal  # type: ignore[import-not-found]  # beside this file, when run as a script

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measured = asyncio.run(bookkeeping(Path(tmp), MemoryJournal, args.quick))
    print(f"alone: {statistics.median(measured.pop('alone')):.3f} us per call")
    for where, modes in measured.items():
        medians = {name: statistics.median(values) for name, values in modes.items()}
        print(f"{where}: with {medians['with']:.4f} ms, without {medians['without']:.4f} ms, "
              f"ratio {medians['with'] / medians['without']:.3f}")
