"""Issue 16: the calls of a cell are an output the host writes, which the kernel cannot forge.

One run in gVisor makes every kind of call (allowed, approved, denied by approver
and by rule, invalid arguments, a tool error, a timeout) and publishes an output
with cellgate's MIME type and metadata, as a forger would. The notebook shows the
host's output once, with the journal's calls; the forged one is renamed and
flagged; `cellgate verify` passes, and fails naming the host-authored output when
it is edited (its bundle or its table), removed or duplicated.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from calls_run import OUTCOMES, record_mixed_run
from conftest import cellgate
from test_frontend_outputs import script_capable

from cellgate.gate.audit.calls_view import CALLS_MIME, is_host_output
from cellgate.gate.audit.verify import verify

pytestmark = pytest.mark.gvisor


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, runsc: object) -> Path:
    return record_mixed_run(tmp_path_factory.mktemp("calls-output"))




def test_the_host_writes_the_calls_output_and_the_kernels_forgery_is_flagged(recorded: Path) -> None:
    nb = nbformat.read(recorded, as_version=4)
    nbformat.validate(nb)
    mixed, quiet = nb.cells
    calls = mixed.metadata.cellgate.calls
    assert [c["ok"] or c["error"]["kind"] for c in calls] == [True, True, *OUTCOMES[2:]]
    assert [c["decision"] for c in calls][:4] == ["allow", "approved", "approval-denied", "deny"]

    host = [o for o in mixed.outputs if is_host_output(o)]
    assert len(host) == 1 and mixed.outputs[-1] is host[0]
    assert host[0]["output_type"] == "display_data" and host[0]["data"][CALLS_MIME] == {"calls": calls}
    table = host[0]["data"]["text/html"]
    assert script_capable(table) == [] and 'class="cellgate-calls"' in table
    for shown in ("approved please", "refused please", "approval-denied", "tools.big", "scripted", "boom",
                  "'two' is not of type", "timeout"):
        assert shown in table, shown
    assert host[0]["data"]["text/plain"].startswith(
        "cellgate recorded 7 gated calls of this cell: 1 allowed, 1 approved, 1 denied by approver, 1 denied by rule, "
        "1 invalid arguments, 1 timed out, 1 tool error")
    assert not any(is_host_output(o) for o in quiet.outputs)  # a cell with no calls gets none

    forged = [o for o in mixed.outputs if "FORGED" in json.dumps(o)]
    assert len(forged) == 1 and not any(mime.startswith("application/vnd.cellgate") for mime in forged[0]["data"])
    assert "in cellgate's own name (cellgate, application/vnd.cellgate.calls+json)" in forged[0]["data"]["text/plain"]
    assert set(forged[0]["data"]) == {"text/plain"}  # every viewer shows the note, not the forged table
    index = mixed.outputs.index(forged[0])
    assert mixed.metadata.cellgate.forged_outputs == [
        {"output": index, "claimed": ["metadata.cellgate", "application/vnd.cellgate.calls+json"]}]
    journal = recorded.with_name("mixed.journal.jsonl").read_text()
    assert '"application/vnd.cellgate.calls+json"' in journal  # the record keeps what the kernel sent
    done = cellgate("verify", str(recorded))
    assert done.returncode == 0, done.stdout + done.stderr


def tampered(recorded: Path, folder: Path, change: str) -> Path:
    shutil.copytree(recorded.parent, folder)
    notebook = folder / recorded.name
    nb = nbformat.read(notebook, as_version=4)
    outputs = nb.cells[0].outputs
    host = outputs[-1]
    if change == "edited":
        host["data"][CALLS_MIME]["calls"][2]["decision"] = "allow"
    elif change == "html edited":
        host["data"]["text/html"] = host["data"]["text/html"].replace("approval-denied", "allow")
    elif change == "removed":
        outputs.pop()
    else:
        outputs.append(copy.deepcopy(host))
    nbformat.write(nb, notebook)
    return notebook


@pytest.mark.parametrize(("change", "said"), [
    ("edited", "which was edited: it no longer shows the journal's calls"),
    ("html edited", "which was edited: it no longer shows the journal's calls"),
    ("removed", "which was removed"),
    ("duplicated", "which appears 2 times (the host wrote it 1 time): an output was added"),
])
def test_verify_names_the_host_output_when_it_is_tampered(
        recorded: Path, tmp_path: Path, change: str, said: str) -> None:
    problems = verify(tampered(recorded, tmp_path / "run", change))  # what `cellgate verify` prints, in-process
    assert problems == [f"cell 1 differs from the journal in its host-authored calls output, {said}"], problems
