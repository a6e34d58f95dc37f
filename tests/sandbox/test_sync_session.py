"""SyncSession: one sandboxed session driven from many threads at once, every cell and call recorded in order."""

from __future__ import annotations

import threading
from pathlib import Path

import nbformat
import pytest
from conftest import SAMPLE_TOOLS

from cellgate.gate import RecordExists, SyncSession
from cellgate.gate.testing import BlockingSession

pytestmark = pytest.mark.gvisor

THREADS = 8


def test_eight_threads_share_one_session_and_the_notebook_holds_their_work_in_order(
        runsc: object, tmp_path: Path) -> None:
    assert issubclass(BlockingSession, SyncSession)  # one implementation
    with SyncSession(tools=[SAMPLE_TOOLS], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as box:
        box.execute("seen = []")
        go = threading.Barrier(THREADS)
        results: dict[int, tuple[str, str, object]] = {}
        failures: list[BaseException] = []

        def work(n: int) -> None:
            try:
                go.wait(60)  # all eight ask at once
                cell = box.execute(f"seen.append({n}); print(tools.add({n}, 1000))")
                direct = box.call_tool("echo", {"text": f"thread {n}"})
                results[n] = (cell.status, cell.stdout, direct.result)
            except BaseException as error:  # handed to the main thread, which fails the test with it
                failures.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        assert not failures, failures
        assert results == {n: ("ok", f"{n + 1000}\n", f"thread {n}") for n in range(THREADS)}
        order = box.execute("print(seen)").stdout
        path = box.notebook_path
    ran = [int(n) for n in order.strip("[]\n").split(", ")]
    assert sorted(ran) == list(range(THREADS))
    cells = nbformat.read(path, as_version=4).cells
    code = [c for c in cells if "tools.add(" in c.source]
    # The notebook has the cells in the order the kernel ran them, each with its own output and gated call.
    assert [int(c.source.split("seen.append(")[1].split(")")[0]) for c in code] == ran
    for cell in code:
        n = int(cell.source.split("seen.append(")[1].split(")")[0])
        assert [o.get("text") for o in cell.outputs if o.output_type == "stream"] == [f"{n + 1000}\n"]
        assert [(c["tool"], c["args"], c["decision"]) for c in cell.metadata.cellgate["calls"]] == [
            ("add", {"a": n, "b": 1000}, "allow")]
    counts = [c.execution_count for c in code]
    assert counts == sorted(counts) and len(set(counts)) == THREADS
    direct = [c for c in cells if c.metadata.get("cellgate", {}).get("kind") == "direct"]
    assert sorted(c.metadata.cellgate["calls"][0]["args"]["text"] for c in direct) == sorted(
        f"thread {n}" for n in range(THREADS))


def test_a_sync_session_method_called_on_its_own_loop_says_so(runsc: object, tmp_path: Path) -> None:
    with SyncSession(tools=[SAMPLE_TOOLS], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as box:
        problems: list[str] = []

        def on_output(output: dict[str, object]) -> None:
            try:
                box.execute("1")
            except RuntimeError as error:
                problems.append(str(error))

        assert box.execute("print('x')", on_output=on_output).ok
    assert problems and "on its own loop" in problems[0]


def test_a_sync_session_that_fails_to_start_leaves_no_loop_thread(runsc: object, tmp_path: Path) -> None:
    (tmp_path / "run.ipynb").write_text("{}")  # a record there already: the start is refused
    box = SyncSession(tools=[SAMPLE_TOOLS], notebook=tmp_path / "run.ipynb", cwd=tmp_path)
    with pytest.raises(RecordExists):
        box.start()
    assert not box._thread.is_alive()
