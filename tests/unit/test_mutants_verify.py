"""`cellgate verify`'s exact findings: runs recorded by the real Recorder and Dispatcher (no sandbox), then tampered
with (a cell edited, added or deleted, the journal cut short or added to, a blob replaced, a link forged), each
refusal asserted word for word; assertions that kill mutants of audit/verify.py (scripts/mutation verify;
CONTRIBUTING, "Mutation testing")."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate import _hostkey as hostkey
from cellgate.gate.audit import verify as verify_module
from cellgate.gate.audit.calls_view import CALLS_MIME
from cellgate.gate.audit.journal import GENESIS, Journal, record_hash
from cellgate.gate.audit.recorder import Recorder
from cellgate.gate.audit.reducer import Reducer
from cellgate.gate.audit.verify import MAX_NAME, _plain_name, check_run, verify
from cellgate.gate.calls.dispatch import CallScope, Dispatcher
from cellgate.gate.calls.policy import Policy
from cellgate.gate.calls.protocol import CallRequest
from cellgate.gate.calls.registry import Tool, ToolRegistry

LONG = "y = '" + "a" * 80 + "'"  # a first line longer than a label shows (60 characters)
SOURCES = ["x = tools.small()\nprint(1)", "\n\n" + LONG + "\nz = tools.report()", "w = 3"]
LABELS = ["(code, 'x = tools.small()')", f"(code, {LONG[:60]!r})", "(code, 'w = 3')"]


def recorded(folder: Path, name: str = "run", *, close: str | None = "session-ended", extra_cell: bool = False,
             **ending: Any) -> Path:
    """A run of three cells (a fourth with ``extra_cell``) as the gate records it: cell 1 makes a call with an
    inline result and prints, cell 2 (its source starting with blank lines) one whose result is a blob, cell 3
    nothing, cell 4 another blob call; its record ended with ``close`` (None: still open, the notebook written after
    its last record)."""
    folder.mkdir(parents=True, exist_ok=True)
    tools = [Tool("small", "", {"type": "object", "properties": {}}, lambda: 3),
             Tool("report", "", {"type": "object", "properties": {}}, lambda: "r" * 5000)]
    recorder = Recorder(folder / f"{name}.ipynb", {})
    gate = Dispatcher(ToolRegistry(tools), log=recorder, policy=Policy.model_validate({"default": "allow"}))
    sources = [*SOURCES, "v = 4"] if extra_cell else SOURCES
    for number, source in enumerate(sources, start=1):
        msg_id = f"m{number}"
        cell = recorder.cell_sent(msg_id, source, False)
        recorder.cell_started(cell)
        recorder.execute_input(cell, number)
        tool = {1: "small", 2: "report", 4: "report"}.get(number)
        if tool:
            scope = CallScope(cell=cell, msg_id=msg_id, key=msg_id, source=source)
            asyncio.run(gate.serve(CallRequest(id=f"c{number}", tool=tool, args={}, cell=msg_id), scope))
        if number == 1:
            recorder.output(cell, {"output_type": "stream", "name": "stdout", "text": "1\n"})
        recorder.cell_ended(cell, "ok", [], None)
    if close is None:
        recorder.write_notebook()
        recorder.journal.close()
        recorder.blobs.close()
    else:
        recorder.close(close, **ending)
    return folder / f"{name}.ipynb"


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    return recorded(tmp_path / "runs")


def edit(notebook: Path, change: Callable[[dict[str, Any]], Any]) -> Path:
    nb = json.loads(notebook.read_text())
    change(nb)
    notebook.write_text(json.dumps(nb, indent=1))
    return notebook


def journal_lines(notebook: Path) -> list[str]:
    return notebook.with_name(notebook.stem + ".journal.jsonl").read_text().splitlines(keepends=True)


def write_journal(notebook: Path, lines: list[str]) -> None:
    notebook.with_name(notebook.stem + ".journal.jsonl").write_text("".join(lines))


def append(notebook: Path, event: str, **data: Any) -> None:
    """A record signed with this host's key, appended to the run's journal after its notebook was written."""
    journal = Journal(notebook.with_name(notebook.stem + ".journal.jsonl"))
    try:
        journal.append(event, **data)
    finally:
        journal.close()


def records(notebook: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal_lines(notebook)]


def host_output(cell: dict[str, Any]) -> dict[str, Any]:
    (found,) = [o for o in cell["outputs"] if (o.get("metadata") or {}).get("cellgate", {}).get("authored_by")]
    return found


# ------------------------------------------------------------------------------------------------- intact runs
def test_an_intact_run_verifies_signed_with_this_hosts_key(run: Path) -> None:
    result = check_run(run)
    assert (result.problems, result.ok, result.unended) == ([], True, None)
    assert result.key_id == hostkey.load(create=False).key_id
    assert result.records == len(records(run)) and result.blobs == 1  # the inline result has no blob
    assert verify(run) == []


def test_every_blob_is_counted(tmp_path: Path) -> None:
    assert check_run(recorded(tmp_path, extra_cell=True)).blobs == 2


def reordered(value: Any) -> Any:
    """``value`` with every mapping's keys in reverse order (what another frontend's save may do)."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    return [reordered(v) for v in value] if isinstance(value, list) else value


def test_a_notebook_saved_with_its_keys_in_another_order_verifies(run: Path) -> None:
    run.write_text(json.dumps(reordered(json.loads(run.read_text()))))
    assert check_run(run).problems == []


def test_a_notebook_naming_the_first_record_is_a_position_of_its_journal(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "run.ipynb", {})  # its notebook written at the session-started record
    early = (tmp_path / "run.ipynb").read_text()
    recorder.close()
    (tmp_path / "run.ipynb").write_text(early)
    assert json.loads(early)["metadata"]["cellgate"]["journal"]["seq"] == 1
    assert check_run(tmp_path / "run.ipynb").problems == [
        "the journal has 1 record after the notebook's last position (record 1): the notebook does not show all of "
        "the run; run `cellgate recover run.journal.jsonl`"]


def test_a_notebook_naming_no_journal_is_said_by_its_path(run: Path) -> None:
    edit(run, lambda nb: nb["metadata"]["cellgate"].pop("journal"))
    assert check_run(run).problems == [f"{run}: its metadata names no journal; is it a cellgate audit notebook?"]


def test_without_a_host_key_nothing_verifies_and_no_key_is_made(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = run.parent / "keys" / "host.key"
    monkeypatch.setenv(hostkey.ENV_VAR, str(absent))
    assert check_run(run).problems == [f"no host key at {absent}; `cellgate install` creates one"]
    assert not absent.exists()


def test_a_run_signed_with_another_hosts_key_or_unsigned_does_not_verify(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    mine = hostkey.load(create=False)
    monkeypatch.setenv(hostkey.ENV_VAR, str(tmp_path / "other" / "host.key"))
    other = hostkey.load()
    notebook = recorded(tmp_path / "runs")
    monkeypatch.setenv(hostkey.ENV_VAR, str(mine.path))
    assert check_run(notebook).problems == [
        f"the journal is signed with host key {other.key_id}; this host's key is {mine.key_id} ({mine.path}): verify "
        "it on the host that recorded it, or point $CELLGATE_HOST_KEY at that key"]
    unsigned = []
    for line in journal_lines(notebook):
        record = json.loads(line)
        record.pop("mac")
        if record["event"] == "session-started":
            record["metadata"].pop("integrity")
        unsigned.append(record)
    prev = GENESIS  # re-hashed and chained again, as someone without the key would
    for record in unsigned:
        record["prev"] = prev
        record["hash"] = prev = record_hash(record)
    write_journal(notebook, [json.dumps(r) + "\n" for r in unsigned])
    assert check_run(notebook).problems == [
        "journal record 1 (seq 1) is not signed: the journal was written without keyed integrity, or its MACs were "
        "removed; it cannot be verified"]


@pytest.mark.parametrize("ending", ["recovered", "session-paused"])
def test_a_run_ended_by_recover_or_a_pause_is_whole(tmp_path: Path, ending: str) -> None:
    notebook = recorded(tmp_path, close=ending)
    assert check_run(notebook).problems == []


def test_a_notebook_saved_through_nbformat_v3_without_its_calls_bundle_verifies(run: Path) -> None:
    def drop_bundle(nb: dict[str, Any]) -> None:
        for cell in nb["cells"][:2]:
            del host_output(cell)["data"][CALLS_MIME]
    edit(run, drop_bundle)
    assert check_run(run).problems == []


def test_a_verified_run_lists_its_problems_and_no_key_when_something_is_wrong(run: Path) -> None:
    edit(run, lambda nb: nb["cells"][2].update(source="w = 4"))
    result = check_run(run)
    assert result.problems == ["cell 3 differs from the journal in its source"] and result.key_id is None
    assert not result.ok and result.unended is None


# ------------------------------------------------------------------------------------ a cell's parts, compared
@pytest.mark.parametrize("change, says", [
    (lambda nb: nb["cells"][1].update(cell_type="markdown"), "cell 2 differs from the journal in its cell_type"),
    (lambda nb: nb["cells"][0].update(source="x = 1"), "cell 1 differs from the journal in its source"),
    (lambda nb: nb["cells"][2].update(execution_count=9), "cell 3 differs from the journal in its execution_count"),
    (lambda nb: nb["cells"][0]["outputs"][0].update(text="2\n"), "cell 1 differs from the journal in its outputs"),
    (lambda nb: nb["cells"][0]["outputs"].pop(0), "cell 1 differs from the journal in its outputs"),
    (lambda nb: nb["cells"][2]["outputs"].append({"output_type": "stream", "name": "stdout", "text": "x"}),
     "cell 3 differs from the journal in its outputs"),
    (lambda nb: nb["cells"][1]["metadata"]["cellgate"].update(status="error"),
     "cell 2 differs from the journal in its metadata.cellgate"),
    (lambda nb: nb["cells"][0]["metadata"]["cellgate"]["calls"][0].update(decision="deny"),
     "cell 1 differs from the journal in its calls"),
    (lambda nb: nb["cells"][2]["metadata"]["cellgate"].update(calls=[{"tool": "forged"}]),
     "cell 3 differs from the journal in its calls"),
    (lambda nb: nb["cells"][2]["metadata"].pop("cellgate"), "cell 3 differs from the journal in its calls"),
    (lambda nb: nb["cells"][2]["metadata"].update(cellgate={"calls": []}),
     "cell 3 differs from the journal in its metadata.cellgate"),
    (lambda nb: nb["metadata"]["cellgate"].update(session_id="forged"),
     "the notebook's metadata.cellgate differs from the journal"),
])
def test_each_part_of_a_cell_is_named_where_it_differs(run: Path, change: Callable[[dict[str, Any]], Any],
                                                         says: str) -> None:
    assert verify(edit(run, change)) == [says]


def calls_bundle(nb: dict[str, Any], index: int) -> dict[str, Any]:
    return host_output(nb["cells"][index])["data"][CALLS_MIME]


@pytest.mark.parametrize("change, says", [
    (lambda nb: nb["cells"][0]["outputs"].append(copy.deepcopy(host_output(nb["cells"][0]))),
     "appears 2 times (the host wrote it 1 time): an output was added"),
    (lambda nb: nb["cells"][0]["outputs"].extend(copy.deepcopy([host_output(nb["cells"][0])] * 2)),
     "appears 3 times (the host wrote it 1 time): an output was added"),
    (lambda nb: nb["cells"][2]["outputs"].append(copy.deepcopy(host_output(nb["cells"][0]))),
     "appears 1 time (the host wrote it 0 times): an output was added"),
    (lambda nb: nb["cells"][1]["outputs"].remove(host_output(nb["cells"][1])), "which was removed"),
    (lambda nb: calls_bundle(nb, 1)["calls"][0].update(tool="other"),
     "which was edited: it no longer shows the journal's calls"),
    (lambda nb: host_output(nb["cells"][0])["data"].update({"text/plain": "nothing was called"}),
     "which was edited: it no longer shows the journal's calls"),
])
def test_the_host_authored_calls_output_added_removed_or_edited_is_named(
        run: Path, change: Callable[[dict[str, Any]], Any], says: str) -> None:
    problems = verify(edit(run, change))
    assert len(problems) == 1 and problems[0].startswith("cell ") and " differs from the journal in its " \
        "host-authored calls output, " in problems[0], problems
    assert problems[0].endswith(says), problems


def test_the_host_output_losing_its_bundle_is_tolerated_but_not_a_changed_one(run: Path) -> None:
    def both(nb: dict[str, Any]) -> None:
        del host_output(nb["cells"][0])["data"][CALLS_MIME]
        calls_bundle(nb, 1)["calls"][0].update(tool="other")
    assert verify(edit(run, both)) == ["cell 2 differs from the journal in its host-authored calls output, which "
                                       "was edited: it no longer shows the journal's calls"]


def test_a_kernel_output_without_the_bundle_where_the_host_output_was_is_not_taken_for_it(run: Path) -> None:
    def replaced(nb: dict[str, Any]) -> None:
        output = host_output(nb["cells"][1])
        output["metadata"] = {}
        del output["data"][CALLS_MIME]
    assert verify(edit(run, replaced)) == ["cell 2 differs from the journal in its host-authored calls output, "
                                           "which was removed"]


# ------------------------------------------------------------------------------------ cells added or deleted
def delete(*indexes: int) -> Callable[[dict[str, Any]], None]:
    def change(nb: dict[str, Any]) -> None:
        for index in sorted(indexes, reverse=True):
            del nb["cells"][index]
    return change


def insert(index: int, source: str, times: int = 1) -> Callable[[dict[str, Any]], None]:
    def change(nb: dict[str, Any]) -> None:
        for _ in range(times):
            nb["cells"].insert(index, {"cell_type": "code", "execution_count": None, "id": f"new-{index}",
                                       "metadata": {}, "outputs": [], "source": source})
    return change


@pytest.mark.parametrize("change, says", [
    (delete(1), f"the notebook has 2 cells, the journal 3: cell 2 of the journal {LABELS[1]} is missing from the "
                "notebook"),
    (delete(0), f"the notebook has 2 cells, the journal 3: cell 1 of the journal {LABELS[0]} is missing from the "
                "notebook"),
    (delete(2), f"the notebook has 2 cells, the journal 3: cell 3 of the journal {LABELS[2]} is missing from the "
                "notebook"),
    (insert(1, "\n  added = 1\nmore"), "the notebook has 4 cells, the journal 3: the notebook's cell 2 (code, "
                                       "'added = 1') is not in the journal"),
    (insert(0, ""), "the notebook has 4 cells, the journal 3: the notebook's cell 1 (code, '') is not in the "
                    "journal"),
    (insert(3, "tail"), "the notebook has 4 cells, the journal 3: the notebook's cell 4 (code, 'tail') is not in "
                        "the journal"),
    (delete(1, 2), "the notebook has 1 cells, the journal 3: the first 1 agree, and cells 2 to 3 are only in the "
                   "journal"),
    (insert(3, "tail", 2), "the notebook has 5 cells, the journal 3: the first 3 agree, and cells 4 to 5 are only "
                           "in the notebook"),
    (delete(0, 1), "the notebook has 1 cells, the journal 3; they differ from cell 1 on: the notebook's cell 1 "
                   f"(code, 'w = 3') is not the journal's {LABELS[0]} (it differs in its source)"),
    (insert(1, "a", 2), "the notebook has 5 cells, the journal 3; they differ from cell 2 on: the notebook's cell 2 "
                        f"(code, 'a') is not the journal's {LABELS[1]} (it differs in its source)"),
])
def test_a_cell_added_or_deleted_is_named(run: Path, change: Callable[[dict[str, Any]], None], says: str) -> None:
    assert verify(edit(run, change)) == [says]


def test_a_deleted_cell_next_to_an_edited_one_is_not_taken_for_a_deletion_alone(run: Path) -> None:
    def both(nb: dict[str, Any]) -> None:
        del nb["cells"][0]
        nb["cells"][1]["source"] = "w = 5"
    assert verify(edit(run, both)) == [
        "the notebook has 2 cells, the journal 3; they differ from cell 1 on: the notebook's cell 1 "
        f"{LABELS[1]} is not the journal's {LABELS[0]} (it differs in its source)"]


def test_an_added_cell_next_to_an_edited_one_is_not_taken_for_an_addition_alone(run: Path) -> None:
    def both(nb: dict[str, Any]) -> None:
        insert(0, "new")(nb)
        nb["cells"][3]["source"] = "w = 5"
    assert verify(edit(run, both)) == [
        "the notebook has 4 cells, the journal 3; they differ from cell 1 on: the notebook's cell 1 (code, 'new') "
        f"is not the journal's {LABELS[0]} (it differs in its source)"]


def test_a_label_shows_a_cells_type_and_first_line(tmp_path: Path) -> None:
    label = verify_module._label
    assert label({"cell_type": "markdown", "source": ["\n", "  # Title  \n", "body"]}) == "(markdown, '# Title  ')"
    assert label({"cell_type": "raw"}) == "(raw, '')"
    assert label({"cell_type": "code", "source": "   \n  "}) == "(code, '')"
    assert label({"cell_type": "code", "source": "b" * 61}) == f"(code, {'b' * 60!r})"


# -------------------------------------------------------------------------- where the notebook stands in the journal
def test_a_journal_with_records_after_the_notebook_says_how_many_and_to_recover(run: Path) -> None:
    append(run, "note", text="after")
    last = len(records(run)) - 1
    one = check_run(run)
    said = (f"the journal has 1 record after the notebook's last position (record {last}): the notebook does not "
            "show all of the run; run `cellgate recover run.journal.jsonl`")
    assert one.unended == said and one.problems == [said] and one.key_id is None
    append(run, "note", text="after")
    two = check_run(run)
    assert two.unended == said.replace("1 record after", "2 records after") and two.problems == [two.unended]


def test_a_journal_whose_last_record_is_torn_says_to_recover(run: Path) -> None:
    lines = journal_lines(run)
    write_journal(run, [*lines, lines[-1][:40]])
    said = ("the journal's last record was cut short (its host stopped while writing it); run `cellgate recover "
            "run.journal.jsonl`")
    result = check_run(run)
    assert (result.unended, result.problems) == (said, [said])


def test_a_journal_without_an_ending_is_a_run_still_going(tmp_path: Path) -> None:
    notebook = recorded(tmp_path, close=None)
    seq = len(records(notebook))
    said = (f"the journal ends at record {seq} (cell-ended) without a session-ended or recovered record (nor a "
            "session-paused one): the run is still going, its host stopped, or the journal was cut short; if its "
            "host stopped, run `cellgate recover run.journal.jsonl`")
    result = check_run(notebook)
    assert (result.unended, result.problems) == (said, [said])


def test_a_journal_cut_short_names_the_missing_records_and_the_cells_beyond_it(run: Path) -> None:
    lines = journal_lines(run)
    cut = next(i for i, r in enumerate(records(run)) if r.get("msg_id") == "m3")  # cell 3's first record
    write_journal(run, lines[:cut])
    kept = records(run)
    result = check_run(run)
    assert result.records == cut and result.unended is None and result.key_id is None
    assert result.problems == [
        f"the notebook names journal record {len(lines)}, but the journal ends at record {cut} ({kept[-1]['event']})"
        f": records {cut + 1} to {len(lines)} are missing; the journal was cut short or replaced",
        f"the notebook has 3 cells, the journal 2: the notebook's cell 3 {LABELS[2]} is not in the journal (as far as "
        "the journal goes)"]


def test_a_journal_cut_short_by_one_record_mid_write_says_so(run: Path) -> None:
    lines = journal_lines(run)
    write_journal(run, [*lines[:-1], lines[-1][:30]])
    last = json.loads(lines[-2])
    assert check_run(run).problems[0] == (
        f"the notebook names journal record {len(lines)}, but the journal ends at record {len(lines) - 1} "
        f"({last['event']}) (the record after it was cut short mid-write): record {len(lines)} is missing; the "
        "journal was cut short or replaced")


def test_a_journal_cut_short_by_two_records_names_both(run: Path) -> None:
    lines = journal_lines(run)
    write_journal(run, lines[:-2])
    last = json.loads(lines[-3])
    assert check_run(run).problems[0] == (
        f"the notebook names journal record {len(lines)}, but the journal ends at record {len(lines) - 2} "
        f"({last['event']}): records {len(lines) - 1} to {len(lines)} are missing; the journal was cut short or "
        "replaced")


def test_a_journal_of_one_record_is_cut_short_not_replaced(run: Path) -> None:
    lines = journal_lines(run)
    write_journal(run, lines[:1])
    problems = check_run(run).problems
    assert problems[0] == (f"the notebook names journal record {len(lines)}, but the journal ends at record 1 "
                           f"(session-started): records 2 to {len(lines)} are missing; the journal was cut short or "
                           "replaced")
    assert problems[1:] == ["the notebook has 3 cells, the journal 0: the first 0 agree, and cells 1 to 3 are only "
                            "in the notebook (as far as the journal goes)"]


@pytest.mark.parametrize("head", [
    lambda last: {"seq": last["seq"], "hash": "0" * 64},
    lambda last: {"seq": 0, "hash": last["hash"]},  # record 0 is none: not the last one by a negative index
    lambda last: {"seq": -1, "hash": last["hash"]},
    lambda last: {"seq": str(last["seq"]), "hash": last["hash"]},
    lambda last: {"hash": last["hash"]},
])
def test_a_notebook_naming_a_record_the_journal_does_not_have_is_refused(
        run: Path, head: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    last = records(run)[-1]
    named = head(last)
    edit(run, lambda nb: nb["metadata"]["cellgate"]["journal"].update(named) or
         [nb["metadata"]["cellgate"]["journal"].pop(k) for k in ("seq",) if k not in named])
    result = check_run(run)
    assert result.problems == [f"the notebook names journal record {named.get('seq')} with hash "
                               f"{named['hash'][:16]}…, which the journal does not have: the notebook or the "
                               "journal was replaced"]
    assert result.records == 0 and result.key_id is None


def test_a_notebook_naming_an_earlier_record_of_its_journal_is_compared_as_of_that_record(run: Path) -> None:
    """A notebook rendered from a prefix of its journal: the records after it are named, and the cells it shows
    are compared with the journal as of its position (not with the journal's end)."""
    rows = records(run)
    at = max(i for i, r in enumerate(rows) if r["event"] == "cell-ended") - 1  # just before cell 3 ended
    edit(run, lambda nb: nb["metadata"]["cellgate"]["journal"].update(seq=at + 1, hash=rows[at]["hash"]))
    problems = check_run(run).problems
    assert problems[0].startswith(f"the journal has {len(rows) - at - 1} records after the notebook's last "
                                  f"position (record {at + 1})")
    assert problems[1:] == [f"the notebook has 3 cells, the journal 2: the notebook's cell 3 {LABELS[2]} is not in "
                            "the journal"]  # a cell shows once it ended


# ------------------------------------------------------------------------------------- the journal itself
def test_a_journal_that_cannot_be_opened_is_the_only_problem(run: Path) -> None:
    run.with_name("run.journal.jsonl").unlink()
    assert check_run(run).problems == [f"the journal 'run.journal.jsonl': run.journal.jsonl in {run.parent} No such "
                                       "file or directory"]


def test_an_edited_journal_record_is_the_only_problem(run: Path) -> None:
    lines = journal_lines(run)
    lines[1] = lines[1].replace('"m1"', '"m9"')
    write_journal(run, lines)
    result = check_run(run)
    assert result.problems == ["journal record 2 does not match its hash: it was edited or damaged"]
    assert result.records == 0


# --------------------------------------------------------------------------------------------- result blobs
def blob_of(notebook: Path) -> Path:
    (blob,) = (notebook.parent / "run.blobs").iterdir()
    return blob


def test_a_replaced_blob_is_named_with_its_call_and_cell(run: Path) -> None:
    blob = blob_of(run)
    blob.write_bytes(b"x" * blob.stat().st_size)
    result = check_run(run)
    assert result.blobs == 1
    hashes_to = hashlib.sha256(blob.read_bytes()).hexdigest()[:16]
    assert result.problems == [f"call #2 (report) of cell 2: the result blob 'run.blobs/{blob.name}' does not match "
                               f"its sha256 (it hashes to {hashes_to}…): it was replaced or damaged"]


def test_a_missing_blob_is_named_and_the_other_checks_still_run(run: Path) -> None:
    blob_of(run).unlink()
    edit(run, lambda nb: nb["cells"][2].update(source="w = 4"))
    problems = check_run(run).problems
    assert problems[0] == "cell 3 differs from the journal in its source"
    assert problems[1].startswith("call #2 (report) of cell 2: the result blob ") and len(problems) == 2, problems


def test_check_blobs_names_a_call_of_no_ended_cell_without_a_cell(tmp_path: Path) -> None:
    records = [{"event": "call-finished", "msg_id": "gone", "call": {"seq": 4, "tool": "t", "result_blob": "x"}},
               {"event": "call-started", "msg_id": "gone", "call": {"seq": 5, "tool": "t", "result_blob": "x"}},
               {"event": "call-finished", "msg_id": "gone", "call": "not a call"},
               {"event": "call-finished", "msg_id": "gone", "call": {"seq": 6, "tool": "t"}}]
    checked, problems = verify_module._check_blobs(tmp_path, "run.journal.jsonl", records, Reducer())
    assert checked == 1
    assert problems == ["call #4 (t): the result blob has no valid result_sha256 (None); the recording is damaged "
                        "or forged"]


# ----------------------------------------------------------------------------------------- a kept trial's links
def test_a_plain_name_is_a_notebook_file_name_in_this_folder_only() -> None:
    assert _plain_name("b.ipynb") == "b.ipynb"
    assert _plain_name("x" * (MAX_NAME - len(".ipynb")) + ".ipynb") is not None  # 255 characters
    assert _plain_name("x" * (MAX_NAME + 1 - len(".ipynb")) + ".ipynb") is None
    assert MAX_NAME == 255
    for bad in (None, 7, b"b.ipynb", "b.json", "b.ipynb.txt", ".b.ipynb", "../b.ipynb", "d/b.ipynb", "d\\b.ipynb",
                "b\n.ipynb", "b\x00.ipynb", "/b.ipynb"):
        assert _plain_name(bad) is None, bad


def chain(folder: Path) -> tuple[Path, Path]:
    """A kept trial's two records: ``a`` ends naming ``b``, whose journal says it continues ``a``."""
    b = folder / "b.ipynb"
    a = recorded(folder, "a", continued_in="b.ipynb")
    recorder = Recorder(b, {})
    recorder.event("session-continued", sync=True, continued_from="a.ipynb", status="ok")
    recorder.event("session-continued", sync=True, continued_from="other.ipynb", status="ok")  # only the first
    recorder.close()
    return a, b


def test_a_kept_trials_two_records_verify_each_naming_the_other(tmp_path: Path) -> None:
    a, b = chain(tmp_path)
    assert (verify(a), verify(b)) == ([], [])


def test_a_link_to_a_notebook_whose_journal_is_missing_says_why(tmp_path: Path) -> None:
    a, b = chain(tmp_path)
    b.with_name("b.journal.jsonl").unlink()
    (problem,) = verify(a)
    assert problem.startswith("the record says it continues in b.ipynb, whose signed journal cannot be read beside "
                              "it: its journal "), problem
    a.with_name("a.journal.jsonl").rename(tmp_path / "a.journal.jsonl.gone")
    assert verify(b)[0].startswith("the journal ")  # b's own journal gone: that is its problem


def test_a_link_to_a_notebook_whose_journal_is_broken_says_its_problem(tmp_path: Path) -> None:
    a, b = chain(tmp_path)
    journal = b.with_name("b.journal.jsonl")
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join([lines[0], lines[2], lines[1], *lines[3:]]))
    assert verify(a) == ["the record says it continues in b.ipynb, whose signed journal cannot be read beside it: "
                         "journal record 2 (seq 3) does not follow the one before it: a record was deleted, "
                         "inserted or reordered"]


def test_a_link_to_a_notebook_signed_with_another_hosts_key_is_refused(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    a = recorded(tmp_path, "a", continued_in="b.ipynb")
    mine = hostkey.load(create=False)
    monkeypatch.setenv(hostkey.ENV_VAR, str(tmp_path / "other" / "host.key"))
    other = hostkey.load()
    recorder = Recorder(tmp_path / "b.ipynb", {})
    recorder.event("session-continued", sync=True, continued_from="a.ipynb", status="ok")
    recorder.close()
    monkeypatch.setenv(hostkey.ENV_VAR, str(mine.path))
    assert verify(a) == ["the record says it continues in b.ipynb, whose signed journal cannot be read beside it: "
                         f"the journal is signed with host key {other.key_id}; this host's key is {mine.key_id} "
                         f"({mine.path}): verify it on the host that recorded it, or point $CELLGATE_HOST_KEY at "
                         "that key"]


def test_a_link_the_other_record_does_not_return_is_refused_both_ways(tmp_path: Path) -> None:
    a, _ = chain(tmp_path)
    c = tmp_path / "c.ipynb"
    recorder = Recorder(c, {})
    recorder.event("session-continued", sync=True, continued_from="a.ipynb", status="ok")
    recorder.close()
    assert verify(c) == ["the record says it continues a.ipynb, whose journal does not end naming c.ipynb as the "
                         "notebook it continues in"]
    d = recorded(tmp_path, "d", continued_in="c.ipynb")
    assert verify(d) == ["the record says it continues in c.ipynb, whose journal does not name d.ipynb as the "
                         "notebook it continues (no session-continued record naming it)"]
    recorded(tmp_path, "e")  # ends, naming no notebook it continues in
    recorder = Recorder(tmp_path / "f.ipynb", {})
    recorder.event("session-continued", sync=True, continued_from="e.ipynb", status="ok")
    recorder.close()
    assert verify(tmp_path / "f.ipynb") == ["the record says it continues e.ipynb, whose journal does not end naming "
                                            "f.ipynb as the notebook it continues in"]


def test_a_link_to_a_neighbour_whose_journal_ends_otherwise_is_refused(tmp_path: Path) -> None:
    recorded(tmp_path, "p", close="session-paused", continued_in="q.ipynb")  # named, but not by session-ended
    recorder = Recorder(tmp_path / "q.ipynb", {})
    recorder.event("session-continued", sync=True, continued_from="p.ipynb", status="ok")
    recorder.close()
    assert verify(tmp_path / "p.ipynb") == []  # a paused record's continued_in is no link
    assert verify(tmp_path / "q.ipynb") == ["the record says it continues p.ipynb, whose journal does not end naming "
                                            "q.ipynb as the notebook it continues in"]


def test_a_bad_name_does_not_stop_the_other_link_being_checked(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "b.ipynb", {})
    recorder.event("session-continued", sync=True, continued_from="gone.ipynb", status="ok")
    recorder.close(continued_in="../c.ipynb")
    problems = verify(tmp_path / "b.ipynb")
    assert problems[0] == ("the record says it continues in '../c.ipynb', which is not a plain notebook name beside "
                           "it; it is not followed, and the link is not checked")
    assert problems[1].startswith("the record says it continues gone.ipynb, whose signed journal cannot be read "
                                  "beside it: ") and len(problems) == 2, problems


@pytest.mark.parametrize("told, shown", [
    ("../b.ipynb", "'../b.ipynb'"),
    (None, "'None'"),
    ("x" * 300, repr("x" * 100)),
])
def test_a_link_that_is_not_a_plain_name_is_not_followed(tmp_path: Path, told: Any, shown: str) -> None:
    a = recorded(tmp_path, "a", continued_in=told)
    assert verify(a) == [f"the record says it continues in {shown}, which is not a plain notebook name beside it; "
                         "it is not followed, and the link is not checked"]
    recorder = Recorder(tmp_path / "b.ipynb", {})
    recorder.event("session-continued", sync=True, continued_from=told, status="ok")
    recorder.close()
    assert verify(tmp_path / "b.ipynb") == [f"the record says it continues {shown}, which is not a plain notebook "
                                            "name beside it; it is not followed, and the link is not checked"]
