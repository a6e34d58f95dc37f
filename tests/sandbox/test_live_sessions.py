"""Live sessions (issue 34): a session's kernel paused into a checkpoint and resumed by another process, forked,
tried in a fork; every checkpoint verified before runsc reads it.

Real gVisor sandboxes and checkpoints (runsc checkpoint / restore), real host processes for the pause and the
resume, ``cellgate verify`` on every record.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest

from cellgate.gate import Session, SessionError
from cellgate.gate import _hostkey as hostkey
from cellgate.gate._json import canonical_json
from cellgate.gate.sandbox.images import build
from cellgate.gate.sandbox.images.spec import PROFILES
from cellgate.gate.session import live
from tests.conftest import SAMPLE_TOOLS, cellgate

# One process pauses, another resumes: the gate that held the session is gone in between.
PAUSE = """
import asyncio, sys
from cellgate.gate import Session

async def main(folder):
    async with Session(tools=[{tools!r}], notebook=f"{{folder}}/run.ipynb", cwd=folder, image={image!r},
                       memory_mb=1024) as session:
        first = await session.execute(
            "import numpy as np\\n"
            "data = np.arange(200 * 1024 * 1024 // 8, dtype=np.int64)\\n"
            "numbers = (n * n for n in range(100))\\n"
            "print(next(numbers), next(numbers), next(numbers))")
        assert first.stdout == "0 1 4\\n", first
        print(await session.checkpoint(f"{{folder}}/paused"))

asyncio.run(main(sys.argv[1]))
"""

RESUME = """
import asyncio, json, sys
from cellgate.gate import Session

async def main(folder):
    async with Session.resume(f"{{folder}}/paused", tools=[{tools!r}], cwd=folder, image={image!r},
                              memory_mb=1024) as session:
        cell = await session.execute(
            "print(data.nbytes, int(data[-1]), next(numbers), next(numbers)); print(tools.add(a=2, b=3))")
        print(json.dumps({{"stdout": cell.stdout, "calls": [c.tool for c in cell.calls],
                          "notebook": str(session.notebook_path)}}))

asyncio.run(main(sys.argv[1]))
"""


def run_python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600)


def events(notebook: Path) -> list[str]:
    journal = notebook.with_name(notebook.stem + ".journal.jsonl")
    return [json.loads(line)["event"] for line in journal.read_text().splitlines()]


@pytest.mark.xdist_group("data-image")  # the data image (numpy) is built once, by one worker
def test_a_paused_session_with_a_200_mb_array_and_a_generator_is_resumed_by_another_process(tmp_path: Path) -> None:
    build.build(PROFILES["data"])  # a no-op when this machine has it
    fill = {"tools": str(SAMPLE_TOOLS), "image": "data"}
    paused = run_python(textwrap.dedent(PAUSE.format(**fill)), str(tmp_path))
    assert paused.returncode == 0, paused.stderr[-3000:]
    checkpoint = Path(paused.stdout.strip().splitlines()[-1])
    assert checkpoint == tmp_path / "paused" and (checkpoint / live.MANIFEST).is_file()
    notebook = tmp_path / "run.ipynb"
    assert events(notebook)[-1] == "session-paused"
    assert cellgate("verify", str(notebook)).returncode == 0  # a paused record verifies on its own

    resumed = run_python(textwrap.dedent(RESUME.format(**fill)), str(tmp_path))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    seen = json.loads(resumed.stdout.strip().splitlines()[-1])
    # The array is whole and the generator goes on where it stopped (it had yielded 0, 1, 4).
    assert seen["stdout"] == f"{200 * 1024 * 1024} {200 * 1024 * 1024 // 8 - 1} 9 16\n5\n"
    assert seen["calls"] == ["add"]  # the resumed kernel's calls are gated and recorded
    assert seen["notebook"] == str(notebook)  # the same notebook goes on
    record = events(notebook)
    assert record.count("session-paused") == record.count("session-resumed") == 1
    assert record.index("session-paused") < record.index("session-resumed") < record.index("call-finished",
                                                                                           record.index("session-resumed"))
    notes = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown"]
    assert [c.metadata.cellgate["kind"] for c in notes] == ["session-paused", "session-resumed"]
    assert "was paused at" in notes[0].source and "was resumed at" in notes[1].source
    checked = cellgate("verify", str(notebook))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_four_forks_each_see_only_their_own_value_and_record_their_calls_in_their_own_notebook(
        tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "parent.ipynb", cwd=tmp_path) as parent:
            await parent.execute("value = 'parent'; loaded = list(range(1000))")
            forks = await parent.fork(4)
            try:
                for number, fork in enumerate(forks, 1):
                    changed = await fork.execute(f"value = 'fork {number}'; print(len(loaded), tools.echo(text=value))")
                    assert changed.stdout == f"1000 fork {number}\n", changed
                    assert [c.tool for c in changed.calls] == ["echo"]
                seen = {"parent": (await parent.execute("print(value)")).stdout}
                for number, fork in enumerate(forks, 1):
                    seen[f"fork {number}"] = (await fork.execute("print(value)")).stdout
                return {"seen": seen, "notebooks": [f.notebook_path for f in forks]}
            finally:
                await asyncio.gather(*(f.shutdown() for f in forks))

    result = asyncio.run(scenario())
    assert result["seen"] == {"parent": "parent\n", **{f"fork {n}": f"fork {n}\n" for n in range(1, 5)}}
    parent = tmp_path / "parent.ipynb"
    parent_events = events(parent)
    assert "session-forked" in parent_events and "call-finished" not in parent_events  # the forks' calls are theirs
    forked_at = [json.loads(line) for line in parent.with_name("parent.journal.jsonl").read_text().splitlines()
                 if json.loads(line)["event"] == "session-forked"][0]
    for number, notebook in enumerate(result["notebooks"], 1):
        assert notebook == tmp_path / f"parent.fork-{number}.ipynb"
        named = nbformat.read(notebook, as_version=4).metadata.cellgate["forked_from"]
        assert named["notebook"] == str(parent) and (named["fork"], named["of"]) == (number, 4)
        assert named["journal"] == {"seq": forked_at["seq"], "hash": forked_at["hash"]}  # the fork point
        assert events(notebook).count("call-finished") == 1  # its own echo, in its own notebook only
        assert cellgate("verify", str(notebook)).returncode == 0
    assert cellgate("verify", str(parent)).returncode == 0


def test_a_trial_runs_in_a_fork_and_is_kept_or_discarded_with_the_record_saying_which(tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            await session.execute("total = 10")
            dropped = await session.trial("total = total * 100; print(total)")
            assert dropped.result.stdout == "1000\n"
            await dropped.discard()
            after_discard = (await session.execute("print(total)")).stdout
            kept = await session.trial("total = total + 1; print(total)")
            await kept.keep()
            after_keep = (await session.execute("print(total)")).stdout
            return {"after_discard": after_discard, "after_keep": after_keep, "notebook": session.notebook_path}

    result = asyncio.run(scenario())
    assert (result["after_discard"], result["after_keep"]) == ("10\n", "11\n")
    original = tmp_path / "run.ipynb"
    assert result["notebook"] == tmp_path / "run.fork-2.ipynb"  # the session goes on in the kept fork's notebook (fork 2: the next free number)
    record = events(original)
    assert record.count("session-forked") == 2
    assert [e for e in record if e.startswith("trial-")] == ["trial-discarded", "trial-kept"]
    notes = [c.source for c in nbformat.read(original, as_version=4).cells if c.cell_type == "markdown"]
    assert any("was discarded" in n for n in notes) and any("was kept" in n for n in notes)
    for notebook in (original, result["notebook"]):
        assert cellgate("verify", str(notebook)).returncode == 0


def test_a_checkpoint_is_refused_while_a_cell_runs_and_the_session_goes_on(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, str]:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            running = asyncio.ensure_future(session.execute("import time\nwhile True: time.sleep(0.05)"))
            while await session.provisioner.running_cell() is None:
                await asyncio.sleep(0.02)  # polling for the cell to be running
            with pytest.raises(SessionError) as refused:
                await session.checkpoint(tmp_path / "never")
            await session.interrupt()
            await running
            return str(refused.value), (await session.execute("print('still here')")).stdout

    refusal, after = asyncio.run(scenario())
    assert "cannot be checkpointed while a cell runs" in refusal and "interrupt" in refusal
    assert after == "still here\n" and not (tmp_path / "never").exists()


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("paused")

    async def pause() -> Path:
        session = await Session(tools=[str(SAMPLE_TOOLS)], notebook=folder / "run.ipynb", cwd=folder).start()
        await session.execute("kept = 42; token = tools.issue_token(user='ann')['token']")
        return await session.checkpoint(folder / "checkpoint")

    return asyncio.run(pause())


def copy_of(checkpoint: Path, target: Path) -> Path:
    subprocess.run(["cp", "-a", str(checkpoint), str(target)], check=True)
    return target


def resign(checkpoint: Path, change: Any, key: hostkey.HostKey | None = None) -> None:
    manifest = checkpoint / live.MANIFEST
    body = json.loads(manifest.read_text())
    body.pop("mac")
    change(body)
    body["mac"] = (key or hostkey.load()).mac(canonical_json(body).encode(), live.MAC_PURPOSE)
    manifest.write_text(json.dumps(body))


@pytest.mark.parametrize("damage, says", [
    ("version", "was made by cellgate 0.0.1"),
    ("truncated", "the checkpoint's image differs from what was saved"),
    ("altered", "the checkpoint's image differs from what was saved"),
    ("other-host", "is not signed by this host's key"),
    ("unsigned-edit", "is not signed by this host's key"),
])
def test_a_damaged_or_foreign_checkpoint_is_refused_before_anything_reads_it(
        paused: Path, tmp_path: Path, damage: str, says: str) -> None:
    checkpoint = copy_of(paused, tmp_path / "copy")
    pages = max((checkpoint / live.IMAGE).iterdir(), key=lambda p: p.stat().st_size)
    if damage == "version":
        resign(checkpoint, lambda body: body.update(cellgate="0.0.1"))
    elif damage == "truncated":
        with open(pages, "r+b") as file:
            file.truncate(pages.stat().st_size // 2)
    elif damage == "altered":
        with open(pages, "r+b") as file:
            file.seek(pages.stat().st_size // 3)
            file.write(b"\x01")
    elif damage == "other-host":
        resign(checkpoint, lambda body: None, key=hostkey.load(tmp_path / "other.key"))
    else:  # the manifest edited without the key: it points at another record
        body = json.loads((checkpoint / live.MANIFEST).read_text())
        body["notebook"] = str(tmp_path / "elsewhere.ipynb")
        (checkpoint / live.MANIFEST).write_text(json.dumps(body))
    with pytest.raises(SessionError) as refused:
        Session.resume(checkpoint, tools=[str(SAMPLE_TOOLS)], cwd=tmp_path)
    assert says in str(refused.value)


def test_a_checkpoint_is_resumed_once_and_only_with_the_setup_it_was_made_with(paused: Path, tmp_path: Path) -> None:
    with pytest.raises(Exception) as other_tools:
        asyncio.run(Session.resume(paused, tools=[], cwd=tmp_path).start())
    assert "resume it with the tools, policy and sandbox settings it was made with" in str(other_tools.value)

    async def resume() -> str:
        async with Session.resume(paused, tools=[str(SAMPLE_TOOLS)], cwd=tmp_path) as session:
            return (await session.execute("print(kept, token)")).stdout

    shown = asyncio.run(resume())
    assert shown.startswith("42 [secret") and "s3cr3t" not in shown  # the resumed gate knows the paused one's secrets
    journal = paused.parent / "run.journal.jsonl"
    assert "s3cr3t" not in journal.read_text() and "session-resumed" in journal.read_text()
    with pytest.raises(SessionError) as again:
        Session.resume(paused, tools=[str(SAMPLE_TOOLS)], cwd=tmp_path)
    assert "it was resumed already; a checkpoint is resumed once" in str(again.value)


def test_cellgate_exec_pauses_resumes_and_tries_a_program_in_a_fork(tmp_path: Path) -> None:
    (tmp_path / "define.py").write_text("x = 1\nprint('defined', x)\n")
    (tmp_path / "fails.py").write_text("x = 100\n1 / 0\n")
    (tmp_path / "show.py").write_text("print('x is', x)\n")
    tools = ["--tools", str(SAMPLE_TOOLS)]
    first = cellgate("exec", "define.py", *tools, "--notebook", "run.ipynb", "--checkpoint", "cp1", cwd=tmp_path)
    assert first.returncode == 0 and first.stdout == "defined 1\n", first.stderr
    assert f"paused: {tmp_path / 'cp1'}" in first.stderr
    tried = cellgate("exec", "--resume", "cp1", "--trial", "fails.py", *tools, "--checkpoint", "cp2", cwd=tmp_path)
    assert tried.returncode == 1 and "trial fails.py: discarded" in tried.stderr and "ZeroDivisionError" in tried.stderr
    shown = cellgate("exec", "--resume", "cp2", "show.py", *tools, cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout == "x is 1\n", shown.stderr  # the failed trial changed nothing
    record = events(tmp_path / "run.ipynb")
    assert record.count("session-paused") == 2 and record.count("session-resumed") == 2
    assert "trial-discarded" in record and record[-1] == "session-ended"
    assert cellgate("verify", str(tmp_path / "run.ipynb")).returncode == 0


def test_a_sync_session_pauses_and_resumes(tmp_path: Path) -> None:
    from cellgate.gate import SyncSession

    with SyncSession(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
        session.execute("rows = [1, 2, 3]")
        folder = session.checkpoint(tmp_path / "paused")
    with SyncSession.resume(folder, tools=[str(SAMPLE_TOOLS)], cwd=tmp_path) as again:
        assert again.execute("print(sum(rows))").stdout == "6\n"
        assert again.notebook_path == tmp_path / "run.ipynb"


def test_a_pool_from_a_session_hands_out_forks_that_hold_its_data(tmp_path: Path) -> None:
    from cellgate.gate import Pool

    async def scenario() -> list[str]:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "loaded.ipynb", cwd=tmp_path) as loaded:
            await loaded.execute("table = {n: n * n for n in range(1000)}")
            pool = await Pool.from_session(loaded, 2)
            try:
                seen = []
                for _ in range(3):  # more than the pool's size: replacements are forks too
                    session = await pool.acquire()
                    seen.append((await session.execute("table[999] = -1; print(table[30])")).stdout)
                    await pool.release(session)
                seen.append((await loaded.execute("print(table[999])")).stdout)  # no fork's change reaches it
                return seen
            finally:
                await pool.close()

    assert asyncio.run(scenario()) == ["900\n", "900\n", "900\n", "998001\n"]
    forks = sorted(p.name for p in tmp_path.glob("loaded.fork-*.ipynb"))
    assert len(forks) >= 3 and all(cellgate("verify", str(tmp_path / name)).returncode == 0 for name in forks)
