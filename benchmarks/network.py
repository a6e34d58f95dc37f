"""The network as gated calls (issue 45): a cell's own HTTP requests through the gate against the same requests made
directly on the host, in the same run.

    .venv/bin/python benchmarks/network.py [--quick]     (or: benchmarks/run.py --only network)

The upstream is a threaded HTTP server on 127.0.0.1 in a child process of its own (so its work does not share
this process's GIL with the gate it is measured through), serving a fixed 1 KB body and a 100 MB body (bytes made
once, written in 1 MB chunks). Both sides use urllib, one request per connection (urllib sends
``Connection: close``):

- in the cell: the session's proxy settings (``HTTP_PROXY``), so each request goes through the kernel's tunnel,
  the relay's ``NetLink`` and the ``NetworkGate`` (a gated call ``http``, recorded), allowed by a
  ``[[network.allow]]`` rule naming 127.0.0.1 literally; timed inside the cell with ``time.perf_counter``;
- on the host: an opener with no proxy, in a thread of this process (the gate's loop stays free), timed the same.

Rows: the p50 and p95 of the 1 KB GET and the difference of the p50s (goal: at most 2 ms); the 100 MB download's
throughput, streamed in 1 MB reads and discarded (goal: at least 200 MB/s; MB = 2**20 bytes). The two sides
alternate in blocks, so the machine's drift falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from cellgate.gate import Session

SMALL_BYTES = 1 << 10
BIG_MB = 100
CHUNK = 1 << 20

# The same client code runs on both sides; ``OPENER`` is the cell's default opener (its proxy settings) or, on the
# host, one with no proxy.
GETS = """
import time, urllib.request
times = []
for i in range({warm} + {count}):
    t = time.perf_counter()
    with OPENER.open({url!r}) as response:
        assert len(response.read()) == {size}
    if i >= {warm}:
        times.append((time.perf_counter() - t) * 1000)
print(' '.join(f'{{x:.4f}}' for x in times))
"""
DOWNLOAD = """
import time, urllib.request
speeds = []
for _ in range({count}):
    got = 0
    t = time.perf_counter()
    with OPENER.open({url!r}) as response:
        while chunk := response.read({chunk}):
            got += len(chunk)
    assert got == {size}, got
    speeds.append(got / (1 << 20) / (time.perf_counter() - t))
print(' '.join(f'{{x:.2f}}' for x in speeds))
"""
CELL_OPENER = "import urllib.request\nOPENER = urllib.request.build_opener()\n"  # ProxyHandler from the environment


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    small = b"s" * SMALL_BYTES
    big = memoryview(b"b" * (BIG_MB << 20))  # made once, at the server's start

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = self.big if self.path == "/big" else memoryview(self.small)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for start in range(0, len(body), CHUNK):
            self.wfile.write(body[start:start + CHUNK])


def serve() -> None:
    """The upstream (the child process): prints its port, serves until its stdin closes."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


def host_run(code: str) -> list[float]:
    """``code`` run in this process with a proxy-less urllib opener: what the same client gets on the host."""
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        exec(code, {"OPENER": urllib.request.build_opener(urllib.request.ProxyHandler({}))})
    return [float(x) for x in out.getvalue().split()]


async def cell_run(session: Session, code: str) -> list[float]:
    result = await session.execute(code)
    assert result.ok, result.text
    return [float(x) for x in result.stdout.split()]


async def network(folder: Path, gets: int, downloads: int, blocks: int = 2) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"host_get": [], "cell_get": [], "host_mbps": [], "cell_mbps": []}
    child = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None
        url = f"http://127.0.0.1:{int(child.stdout.readline())}"
        config = folder / "network.toml"
        config.write_text(f"[network]\nmax_response_mb = {2 * BIG_MB}\n\n[[network.allow]]\nurl = \"{url}/*\"\n")
        small = GETS.format(warm=max(5, gets // 10), count=gets // blocks, url=f"{url}/small", size=SMALL_BYTES)
        big = DOWNLOAD.format(count=max(1, downloads // blocks), url=f"{url}/big", chunk=CHUNK, size=BIG_MB << 20)
        async with Session(config=config, notebook=folder / "network.ipynb", cwd=folder) as session:
            assert (await session.execute(CELL_OPENER)).ok
            for block in range(blocks):
                for side in ("host", "cell") if block % 2 == 0 else ("cell", "host"):
                    for kind, code in (("get", small), ("mbps", big)):
                        if side == "host":
                            out[f"host_{kind}"] += await asyncio.to_thread(host_run, code)
                        else:
                            out[f"cell_{kind}"] += await cell_run(session, code)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)
    return out


def rows(measured: dict[str, list[float]], row: Any) -> list[dict[str, Any]]:
    host, cell = measured["host_get"], measured["cell_get"]
    more = statistics.median(cell) - statistics.median(host)
    return [
        row("1 KB GET, urllib on the host directly", host),
        row("1 KB GET, urllib in a cell through the gate", cell, baseline=host),
        row("  its p50 less the host's (goal <= 2)", [more]),
        row(f"{BIG_MB} MB download, urllib on the host directly", measured["host_mbps"], unit="MB/s"),
        row(f"{BIG_MB} MB download in a cell (goal >= 200)", measured["cell_mbps"], unit="MB/s",
            baseline=measured["host_mbps"]),
    ]


def _row(name: str, values: list[float], unit: str = "ms", baseline: list[float] | None = None) -> dict[str, Any]:
    ordered = sorted(values)
    entry: dict[str, Any] = {"metric": name, "unit": unit, "median": statistics.median(values),
             "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]}
    if baseline:
        entry["ratio"] = entry["median"] / statistics.median(baseline)
    return entry


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the upstream's child process
    args = parser.parse_args()
    if args.serve:
        serve()
        sys.exit()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        measured = asyncio.run(network(Path(tmp), *((100, 4) if args.quick else (500, 10))))
    for r in rows(measured, _row):
        ratio = f"  ratio {r['ratio']:.2f}" if "ratio" in r else ""
        print(f"{r['metric']:<50} median {r['median']:>9.2f}  p95 {r['p95']:>9.2f} {r['unit']}{ratio}")
    print(f"({time.perf_counter() - started:.0f} s)")
