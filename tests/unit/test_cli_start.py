"""The command line starts light: what `cellgate --help` and a built-in command import (benchmarks/run.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Each is imported where a command needs it; together they are most of a second, jsonschema alone seconds.
HEAVY = ("jupyter_client", "nbconvert", "nbformat", "jsonschema", "zmq", "pydantic", "rich", "asyncio",
         "anthropic", "mcp", "httpx2", "docstring_parser")

RUN_MAIN = """
import json, sys
from cellgate.gate.ops.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def modules_after(*args: str) -> tuple[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", RUN_MAIN, *args], capture_output=True, text=True, check=True)
    return done.stdout, set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_help_imports_no_heavy_module_and_still_lists_the_extensions_commands() -> None:
    out, modules = modules_after("--help")
    assert "show" in out and "run" in out and "mcp" in out
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith("cellgate.gate.session"))
    assert loaded == []


def test_a_built_in_command_does_not_load_the_extensions() -> None:
    out, modules = modules_after("show", "--help")
    assert "usage: cellgate show" in out
    assert not any(m.startswith("cellgate.extensions") for m in modules)
    assert "importlib.metadata" not in modules


def test_show_reads_a_notebook_without_nbformat(tmp_path: Path) -> None:
    notebook = tmp_path / "run.ipynb"
    cell = {"cell_type": "code", "source": ["print(1)\n", "print(2)"], "outputs": [], "execution_count": 1,
            "metadata": {"cellgate": {"status": "ok", "calls": [{"seq": 1, "tool": "echo", "decision": "allow",
                                                                 "ok": True, "duration_ms": 1.5}]}}}
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": [cell],
                                    "metadata": {"cellgate": {"session_id": "0123456789abcdef"}}}))
    out, modules = modules_after("show", str(notebook))
    assert "session 0123456789ab" in out and "print(1)" in out and "#1 echo decision=allow" in out
    assert not {"nbformat", "jsonschema"} & {m.split(".")[0] for m in modules}


def test_jsonschema_formats_check_the_same_with_their_slow_module_deferred() -> None:
    code = """
import json, sys
from cellgate.gate._startup import defer_slow_imports
if sys.argv[1] == "deferred":
    defer_slow_imports()
import jsonschema
loaded_at_import = "rfc3987_syntax.syntax_helpers" in sys.modules
checker = jsonschema.FormatChecker()
cases = [("iri", "http://example.org/\\u00fc"), ("iri", "::"), ("iri-reference", "../a"), ("uri", "x y"),
         ("uri", "http://example.org"), ("date-time", "2026-12-01T00:00:00Z"), ("date-time", "December")]
print(json.dumps([loaded_at_import, [checker.conforms(value, name) for name, value in cases]]))
"""

    def run(mode: str) -> list[object]:
        done = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True)
        return list(json.loads(done.stdout))

    deferred, eager = run("deferred"), run("eager")
    assert eager[0] is True, "rfc3987_syntax (installed with jupyterlab) is what jsonschema imports at import"
    assert deferred[0] is False
    assert deferred[1] == eager[1] == [True, False, True, False, True, True, False]
