"""Work that outlives its cell (a thread): its output stays with the cell that started it, flagged late,
and it cannot act through the gate once that cell has ended."""

from __future__ import annotations

import nbformat

from cellgate.gate.audit.journal import read_journal
from cellgate.gate.audit.recorder import journal_path

STARTER = """\
import threading
go, done = threading.Event(), threading.Event()
def work():
    go.wait()
    print('late line', flush=True)
    try:
        tools.echo('from the thread')
    except tools.ToolError as error:
        print('refused:', type(error).__name__, flush=True)
    done.set()
threading.Thread(target=work).start()
print('cell 1 done')
"""


def test_late_output_is_kept_with_its_cell_and_late_calls_are_refused(session_factory) -> None:
    box = session_factory()
    first = box.execute(STARTER)
    assert first.stdout == "cell 1 done\n"
    second = box.execute("go.set()\nassert done.wait(60)\nprint('cell 2 done')")
    assert second.stdout == "cell 2 done\n"  # nothing of the thread's is merged into cell 2
    assert second.calls == []
    assert box.execute("print(tools.echo('cell 3 may call'))").stdout == "cell 3 may call\n"
    nb = nbformat.read(box.session.notebook_path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    late = code[-3].metadata.cellgate["late_outputs"]
    assert "".join(o.get("text", "") for o in late) == "late line\nrefused: ToolUnavailable\n"
    assert [o["text"] for o in code[-3].outputs] == ["cell 1 done\n"]
    assert "late_outputs" not in code[-2].metadata.cellgate
    events = read_journal(journal_path(box.session.notebook_path)).records
    rejected = [r for r in events if r["event"] == "call-rejected"]
    assert rejected and rejected[-1]["reason"].startswith("late") and rejected[-1]["tool"] == "echo"
