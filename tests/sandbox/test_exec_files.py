"""``cellgate exec --input FILE[:DEST] --output PATH[:DEST]`` (issue 32, item 5): files in before the first cell
and out after the last, each recorded by sha256 and kept as a blob, and the inputs put back by replay."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from conftest import cellgate

pytestmark = pytest.mark.gvisor

PROGRAM = """
import csv, collections
totals = collections.Counter()
with open('orders.csv') as f:
    for row in csv.DictReader(f):
        totals[row['region']] += int(row['amount'])
with open('/tmp/totals.csv', 'w') as f:
    f.writelines(f'{region},{total}\\n' for region, total in sorted(totals.items()))
print(len(totals), sum(totals.values()))
"""


def journal(notebook: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in notebook.with_suffix(".journal.jsonl").read_text().splitlines()]


def test_exec_uploads_inputs_downloads_outputs_and_replay_puts_the_inputs_back(tmp_path: Path, runsc: object) -> None:
    rows = ["region,amount", *(f"r{i % 7},{i}" for i in range(20_000))]
    orders = tmp_path / "orders.csv"
    orders.write_text("\n".join(rows) + "\n")
    (tmp_path / "totals.py").write_text(PROGRAM)
    (tmp_path / "out").mkdir()
    notebook = tmp_path / "run.ipynb"
    done = cellgate("exec", "totals.py", "--input", "orders.csv", "--output", "/tmp/totals.csv:out/totals.csv",
                    "--notebook", str(notebook), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"7 {sum(range(20_000))}\n"
    written = (tmp_path / "out" / "totals.csv").read_text().splitlines()
    assert len(written) == 7 and written[0] == f"r0,{sum(range(0, 20_000, 7))}"
    digest = hashlib.sha256(orders.read_bytes()).hexdigest()
    assert f"uploaded orders.csv to /workspace/orders.csv ({orders.stat().st_size:,} bytes, sha256 {digest[:16]})" \
        in " ".join(done.stderr.split())

    moved = {r["event"]: r for r in journal(notebook) if r["event"] in ("file-uploaded", "file-downloaded")}
    assert moved["file-uploaded"]["sha256"] == digest
    out_digest = hashlib.sha256((tmp_path / "out" / "totals.csv").read_bytes()).hexdigest()
    assert moved["file-downloaded"]["sha256"] == out_digest
    assert cellgate("verify", str(notebook)).returncode == 0

    orders.unlink()  # replay needs no host file: the input comes back from the record's blob
    replayed = cellgate("replay", str(notebook), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "put back /workspace/orders.csv" in replayed.stdout and "cell 1: recorded ok, replayed ok" in replayed.stdout


def test_a_missing_input_or_a_bad_spec_is_refused_before_any_sandbox_starts(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("print(1)\n")
    (tmp_path / "data").mkdir()
    os.mkfifo(tmp_path / "pipe")  # opening it to read would block the session for good
    for args, said in [(["--input", "absent.csv"], "--input 'absent.csv': No such file or directory"),
                       (["--input", "data"], "--input 'data' is a folder"),
                       (["--input", "."], "--input '.' names no file"),
                       (["--input", "pipe"], "--input 'pipe' is not a regular file"),
                       (["--output", "x.csv:"], "--output 'x.csv:': give FILE or FILE:DEST")]:
        done = cellgate("exec", "p.py", *args, "--notebook", str(tmp_path / "n.ipynb"), cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert said in " ".join(done.stderr.split())
        assert not (tmp_path / "n.ipynb").exists() and not (tmp_path / "n.journal.jsonl").exists()


def test_an_output_is_not_fetched_after_a_failed_cell_and_a_missing_one_is_a_clear_error(tmp_path: Path,
                                                                                         runsc: object) -> None:
    (tmp_path / "fails.py").write_text("open('/tmp/partial', 'w').write('x')\nraise SystemExit(3)\n")
    done = cellgate("exec", "fails.py", "--output", "/tmp/partial", "--notebook", str(tmp_path / "a.ipynb"),
                    cwd=tmp_path)
    assert done.returncode == 1 and "no --output fetched: a cell failed" in done.stderr
    assert not (tmp_path / "partial").exists()

    (tmp_path / "ok.py").write_text("print('done')\n")
    done = cellgate("exec", "ok.py", "--output", "/tmp/never-written", "--notebook", str(tmp_path / "b.ipynb"),
                    cwd=tmp_path)
    assert done.returncode == 2 and "/tmp/never-written" in done.stderr, done.stderr

    # Every input is checked against the limit before the first is sent: none of the two goes in.
    (tmp_path / "small.csv").write_text("a\n")
    (tmp_path / "big.bin").write_bytes(b"\0" * (2 << 20))
    (tmp_path / "limit.toml").write_text("[sandbox]\nfile_limit_mb = 1\n")
    done = cellgate("exec", "ok.py", "--config", "limit.toml", "--input", "small.csv", "--input", "big.bin",
                    "--notebook", str(tmp_path / "c.ipynb"), cwd=tmp_path)
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "--input 'big.bin' is 2,097,152 bytes, over the limit of 1,048,576" in said, said
    events = [r["event"] for r in map(json.loads, (tmp_path / "c.journal.jsonl").read_text().splitlines())]
    assert "file-uploaded" not in events and "cell-sent" not in events
