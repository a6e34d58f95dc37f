"""Programs end (issue 42, finding 8): a program that returns from ``main`` with its session and two forks still
running exits; each sandbox is deleted, each record ends saying the program ended without shutting it down, and a
ResourceWarning names each notebook. Before, concurrent.futures joined the threads waiting on the running
sandboxes at interpreter exit and the program hung until killed.

Real gVisor sandboxes, a real host process for the program.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from cellgate.gate import Session
from tests.conftest import SAMPLE_TOOLS, cellgate, runsc_sandboxes

# The docs' fork snippet as a program that forgets to end anything: main returns with 3 sessions running.
FORGETS = """
import asyncio, json, sys
from cellgate.gate import Session

async def main(folder):
    parent = await Session(tools=[{tools!r}], notebook=f"{{folder}}/parent.ipynb", cwd=folder).start()
    await parent.execute("value = 'parent'")
    forks = await parent.fork(2)
    for number, fork in enumerate(forks, 1):
        cell = await fork.execute(f"value = 'fork {{number}}'; print(value)")
        print(cell.stdout, end="", flush=True)
    print(json.dumps({{"notebooks": [str(s.notebook_path) for s in (parent, *forks)],
                      "sandboxes": [s.provisioner.handle.id for s in (parent, *forks)]}}), flush=True)

asyncio.run(main(sys.argv[1]))
"""


def journal(notebook: Path) -> list[dict[str, object]]:
    path = notebook.with_name(notebook.stem + ".journal.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_program_that_never_shuts_its_session_or_forks_down_exits_and_leaves_no_sandbox(tmp_path: Path) -> None:
    program = subprocess.Popen(
        [sys.executable, "-W", "always::ResourceWarning", "-c", textwrap.dedent(FORGETS.format(tools=str(SAMPLE_TOOLS))),
         str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        out, err = program.communicate(timeout=120)  # the bound: a program that hangs at exit never gets here
    finally:
        if program.poll() is None:  # hung: kill it, so the sandboxes it left are the suite's end check's to name
            program.kill()
            program.communicate()
    assert program.returncode == 0, err[-3000:]
    lines = out.splitlines()
    assert lines[:2] == ["fork 1", "fork 2"], out
    told = json.loads(lines[2])
    notebooks, sandboxes = [Path(n) for n in told["notebooks"]], told["sandboxes"]
    assert notebooks == [tmp_path / "parent.ipynb", tmp_path / "parent.fork-1.ipynb", tmp_path / "parent.fork-2.ipynb"]
    left = [line for line in runsc_sandboxes() if any(box in line for box in sandboxes)]
    assert left == [], left
    for notebook in notebooks:
        assert f"ResourceWarning: the session of {notebook} was still running when the program ended" in err, err
        last = journal(notebook)[-1]
        assert (last["event"], last["reason"]) == ("session-ended", "program-exit"), last
        assert last["note"] == "the program ended without shutting the session down"
        checked = cellgate("verify", str(notebook))
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_async_with_a_fork_ends_it_without_starting_it_again(tmp_path: Path) -> None:
    async def scenario() -> Path:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "parent.ipynb", cwd=tmp_path) as parent:
            await parent.execute("value = 'parent'")
            [fork] = await parent.fork(1)
            async with fork as entered:  # a started session: entered as it is, ended on the way out
                assert entered is fork
                assert (await fork.execute("print(value)")).stdout == "parent\n"
                notebook = fork.notebook_path
            assert fork.km is None
            return notebook

    notebook = asyncio.run(scenario())
    last = journal(notebook)[-1]
    assert last["event"] == "session-ended" and "reason" not in last, last
