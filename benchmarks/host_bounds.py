"""What the host's bounds cost, as ratios: the measurements the security tests used to assert as times.

    .venv/bin/python benchmarks/host_bounds.py [--no-sandbox]

- secret scrubbing: the cost of marking one more value secret with 5,000 known against 500 known (about 1 when
  the patterns are merged like a binary counter; about 10 if every call rebuilt one pattern of all of them), and
  a 1 MB scan with 5,000 secrets known against one (tests/security/test_hostile_artifacts_display.py, H13,
  counts the rebuilds instead);
- the gate's event loop while a kernel floods it with late output under a 7 MB notebook: how long a no-op takes
  to run on it, against the same with no flood (tests/security/test_host_bounds.py, B4, counts the bytes the
  host writes instead).

Prints one line per measurement with its ratio. Ratios, not times, are the targets: these machines are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from cellgate.gate.calls.scrubber import SecretScrubber
from cellgate.gate.testing import BlockingSession

TOOLS = Path(__file__).resolve().parents[1] / "tests" / "tools" / "sample_tools.py"


def per_secret_add_us(known: int, extra: int = 500) -> float:
    """Microseconds to mark one more value secret, averaged over ``extra`` values, with ``known`` already known."""
    kept = SecretScrubber()
    for i in range(known):
        kept.add(f"tok-{i:06d}-{os.urandom(6).hex()}", "known")
    start = time.perf_counter()
    for i in range(extra):
        kept.add(f"new-{i:06d}-{os.urandom(6).hex()}", "new")
    return (time.perf_counter() - start) / extra * 1e6


def scan_ms(known: int) -> float:
    kept = SecretScrubber()
    tokens = [f"tok-{i:06d}-{os.urandom(6).hex()}" for i in range(known)]
    for value in tokens:
        kept.add(value, "known")
    text = " ".join(tokens[::500]) + " plain output line\n" * 50_000  # about 1 MB
    start = time.perf_counter()
    kept.scrub_text(text)
    return (time.perf_counter() - start) * 1000


def scrubbing() -> list[tuple[str, float, float, float]]:
    small = statistics.median(per_secret_add_us(500) for _ in range(3))
    large = statistics.median(per_secret_add_us(5000) for _ in range(3))
    one = statistics.median(scan_ms(1) for _ in range(3))
    many = statistics.median(scan_ms(5000) for _ in range(3))
    return [("mark one more secret: 5,000 known vs 500 (us)", small, large, large / small),
            ("scan 1 MB: 5,000 secrets vs 1 (ms)", one, many, many / one)]


CHURN = '''
import threading, time
tools.echo("warm")
go = threading.Event()
def churn():
    go.wait()
    for _ in range(700):
        print(".", end="", flush=True)
        time.sleep(0.002)
churner = threading.Thread(target=churn, daemon=True)
churner.start()
for _ in range(112):
    print("B" * 65535, flush=True)
'''


def worst_loop_lag_ms(box: BlockingSession, code: str) -> float:
    """The longest a no-op waits for the gate's event loop while ``code`` runs."""
    loop = box.session.provisioner.service.loop
    worst, stop = [0.0], threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            start = time.monotonic()
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(120)
            worst[0] = max(worst[0], time.monotonic() - start)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        box.execute(code)
    finally:
        stop.set()
        sampler.join(150)
    return worst[0] * 1000


def late_output_lag(folder: Path) -> tuple[str, float, float, float]:
    calls = "for _ in range(20):\n    tools.echo('x')\n"
    with BlockingSession(tools=[str(TOOLS)], notebook=folder / "lag.ipynb", cwd=folder, cell_timeout=120.0) as box:
        box.execute(CHURN)
        quiet = worst_loop_lag_ms(box, calls)
        flooded = worst_loop_lag_ms(box, "go.set()\nwhile churner.is_alive():\n    tools.echo('x')\n" + calls)
    return "gate loop lag: late-output flood vs quiet (ms)", quiet, flooded, flooded / quiet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-sandbox", action="store_true", help="only the measurements that need no gVisor")
    options = parser.parse_args()
    rows = scrubbing()
    if not options.no_sandbox:
        with tempfile.TemporaryDirectory() as folder:
            rows.append(late_output_lag(Path(folder)))
    for name, base, measured, ratio in rows:
        print(f"{name:50} {base:10.2f} {measured:10.2f}  ratio {ratio:6.2f}")


if __name__ == "__main__":
    main()
