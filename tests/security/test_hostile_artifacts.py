"""H9-H12: a run folder someone hands the CLI is hostile input (SECURITY.md section 13).

Each attack is a crafted copy of a real recorded run (recorded in gVisor),
handed to the real CLI in a subprocess. A host canary proves where a replayed
cell ran: the recorded cell writes a file at a path of the host's pytest
folder; under gVisor it lands in the sandbox's own /tmp and never on the host.
Every CLI run here is watched for its peak RSS (``os.wait4``) and has a
deadline, so an OOM or a hang fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from conftest import CELLGATE

from cellgate.gate import _hostkey as hostkey
from cellgate.gate.audit.journal import read_journal, record_hash
from cellgate.gate.audit.recorder import Reducer

ROOT = Path(__file__).resolve().parents[2]
COUNTED = ROOT / "tests" / "tools" / "counted.py"
MAX_RSS_MB = 300


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    peak_rss_mb: float


# Runs the CLI as its own child and reports that child's peak RSS. The CLI must not be a direct child
# of pytest: Linux keeps the larger of a process's own peak and that of the memory it was forked (or
# vforked) from, so a child of the big test process would report the test process's size.
PEAK_PROBE = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
if code < 0:  # killed by a signal: end the same way, so the caller sees it
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300) -> Done:
    """Run the real CLI; its own peak RSS is measured, and it never outlives ``timeout``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as peak:
        proc = subprocess.Popen([sys.executable, "-S", "-c", PEAK_PROBE, peak.name, *CELLGATE, *args], stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True,
                                env={**os.environ, **(env or {})})
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"cellgate {' '.join(args)} did not finish within {timeout} s") from None
        out.seek(0)
        err.seek(0)
        # stderr with its whitespace folded: the terminal console wraps long messages.
        return Done(proc.returncode, out.read().decode(errors="replace"),
                    " ".join(err.read().decode(errors="replace").split()), int(peak.read() or 0) / 1024)


@dataclass
class Run:
    folder: Path
    canary: Path  # the host path the recorded cell writes

    @property
    def notebook(self) -> Path:
        return self.folder / "run.ipynb"

    @property
    def journal(self) -> Path:
        return self.folder / "run.journal.jsonl"

    def blob(self) -> Path:
        (name,) = [c["result_blob"] for c in self.calls() if "result_blob" in c]
        return self.folder / name

    def calls(self) -> list[dict]:
        nb = json.loads(self.notebook.read_text())
        return [c for cell in nb["cells"] for c in cell["metadata"].get("cellgate", {}).get("calls", [])]

    def edit_notebook(self, change) -> None:
        nb = json.loads(self.notebook.read_text())
        change(nb)
        self.notebook.write_text(json.dumps(nb, indent=1))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, runsc: object) -> Run:
    base = tmp_path_factory.mktemp("hostile")
    folder = base / "recorded"
    folder.mkdir()
    canary = base / "host-only" / "canary"
    cell1 = folder / "cell1.py"
    cell1.write_text(f"import os\nos.makedirs({str(canary.parent)!r}, exist_ok=True)\n"
                     f"open({str(canary)!r}, 'w').write('this cell ran here')\nrows = tools.ledger(300)\n"
                     "print(len(rows))")
    cell2 = folder / "cell2.py"
    cell2.write_text("print(tools.charge(5))")
    done = cli("exec", str(cell1), str(cell2), "--tools", str(COUNTED), "--notebook", str(folder / "run.ipynb"),
               env={"CELLGATE_TEST_COUNT_FILE": str(base / "count")})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "300\ncharged 5\n"
    assert not canary.exists()  # recorded in gVisor: the write stayed in the sandbox
    for program in (cell1, cell2):
        program.unlink()
    assert cli("verify", str(folder / "run.ipynb")).returncode == 0
    return Run(folder, canary)


@pytest.fixture()
def run(recorded: Run, tmp_path: Path) -> Run:
    """A fresh copy of the recorded run folder, for one attack."""
    folder = tmp_path / "bundle"
    shutil.copytree(recorded.folder, folder, symlinks=True)
    return Run(folder, recorded.canary)


def bounded(done: Done) -> Done:
    assert 0 < done.peak_rss_mb < MAX_RSS_MB, f"the CLI peaked at {done.peak_rss_mb:.0f} MB"
    assert "Traceback" not in done.stderr, done.stderr
    return done


# ---------------------------------------------------------------- H9: config from the folder

HOSTILE_TOML = """
[tools]
modules = ["payload.py"]

[sandbox]
isolation = "none"
memory_mb = 65536
"""


def hostile_folder(run: Run) -> Path:
    (run.folder / "cellgate.toml").write_text(HOSTILE_TOML)
    marker = run.folder / "payload-imported"
    (run.folder / "payload.py").write_text(f"open({str(marker)!r}, 'w').write('imported on the host')\n"
                                           "def steal() -> str:\n    return 'x'\n")
    return marker


@pytest.mark.parametrize("where", ["inside its folder", "elsewhere"])
def test_H9_a_cellgate_toml_beside_the_notebook_is_never_used(run: Run, tmp_path: Path, where: str) -> None:
    marker = hostile_folder(run)
    cwd = run.folder if where == "inside its folder" else tmp_path
    done = bounded(cli("replay", str(run.notebook), "--notebook", str(tmp_path / "replay.ipynb"), cwd=cwd))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cell 1: recorded ok, replayed ok" in done.stdout and "cell 2: recorded ok, replayed ok" in done.stdout
    assert not run.canary.exists(), "a replayed cell ran on the host"
    assert not marker.exists(), "a module named by the folder's cellgate.toml was imported"
    replayed = nbformat.read(tmp_path / "replay.ipynb", as_version=4)
    assert replayed.metadata.cellgate.sandbox.runtime == "gvisor"
    assert replayed.metadata.cellgate.sandbox.limits.memory_mb == 1024  # the operator's defaults, not the folder's
    if where == "inside its folder":
        assert "ignoring" in done.stderr and "folder of the notebook being replayed" in done.stderr


def test_H9_isolation_none_from_the_operators_own_config_needs_the_unsafe_flag(run: Run, tmp_path: Path) -> None:
    operator = tmp_path / "operator"
    operator.mkdir()
    (operator / "cellgate.toml").write_text('[sandbox]\nisolation = "none"\n')
    for config in (["--config", str(operator / "cellgate.toml")], []):  # explicit, then found in the operator's cwd
        done = bounded(cli("replay", str(run.notebook), *config, cwd=operator))
        assert done.returncode == 2, done.stdout + done.stderr
        assert "refuses to run a recording's cells outside gVisor" in done.stderr
        assert "--unsafe-no-sandbox" in done.stderr
        assert "cell 1" not in done.stdout and not run.canary.exists()
    # The control: with the flag, the canary does appear on the host, so its absence above means something.
    done = bounded(cli("replay", str(run.notebook), "--config", str(operator / "cellgate.toml"),
                       "--unsafe-no-sandbox", "--notebook", str(tmp_path / "unsafe.ipynb")))
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "WITHOUT gVisor" in done.stderr
        assert run.canary.read_text() == "this cell ran here"
    finally:
        shutil.rmtree(run.canary.parent, ignore_errors=True)


# ---------------------------------------------------------------- H10: code named by the notebook

def test_H10_live_tools_never_come_from_paths_the_notebook_names(run: Run, tmp_path: Path) -> None:
    marker = hostile_folder(run)
    (run.folder / "cellgate.toml").unlink()
    run.edit_notebook(lambda nb: nb["metadata"]["cellgate"]["tools"].update(
        sources=[str(run.folder / "payload.py"), "payload.py"]))
    trusted = tmp_path / "trusted.toml"
    trusted.write_text('[sandbox]\nisolation = "gvisor"\n')
    done = bounded(cli("replay", str(run.notebook), "--live", "charge", "--config", str(trusted)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--live charge: not defined by the operator's tools" in done.stderr
    assert "never imported" in done.stderr and not marker.exists()


def test_H10_live_tools_from_the_operator_with_the_manifest_difference_said(run: Run, tmp_path: Path) -> None:
    marker = hostile_folder(run)
    (run.folder / "cellgate.toml").unlink()

    def tamper(nb: dict) -> None:
        nb["metadata"]["cellgate"]["tools"]["sources"] = [str(run.folder / "payload.py")]
        for entry in nb["metadata"]["cellgate"]["tools"]["manifest"]:
            if entry["name"] == "charge":
                entry["description"] = "Charge an amount."
                entry["parameters"]["properties"]["currency"] = {"type": "string"}

    run.edit_notebook(tamper)
    count = tmp_path / "count"
    done = bounded(cli("replay", str(run.notebook), "--live", "charge", "--tools", str(COUNTED),
                       "--notebook", str(tmp_path / "live.ipynb"), env={"CELLGATE_TEST_COUNT_FILE": str(count)}))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "live calls: 1" in done.stdout and count.read_text().splitlines() == ["5"]
    assert "live tool 'charge' differs from the recorded one: its description differs; parameters removed: " \
           "currency" in done.stderr
    assert not marker.exists() and not run.canary.exists()


# ---------------------------------------------------------------- H11: paths named by the notebook or journal

def _blob_named(name: str):
    def change(nb: dict) -> None:
        for cell in nb["cells"]:
            for call in cell["metadata"].get("cellgate", {}).get("calls", []):
                if "result_blob" in call:
                    call["result_blob"] = name
    return change


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _zero_device(path: Path) -> None:
    path.unlink()
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is


def _symlink_to(target: str):
    def make(path: Path) -> None:
        path.unlink()
        path.symlink_to(target)
    return make


def _sparse(path: Path) -> None:
    os.truncate(path, 2 << 30)  # 2 GiB of zeros, no newline


@pytest.mark.parametrize(("name", "expected"), [
    ("/etc/shadow", "only a plain relative path inside the run's folder"),
    ("/dev/zero", "only a plain relative path inside the run's folder"),
    ("../../../etc/shadow", "only a plain relative path inside the run's folder"),
    ("run.blobs/../../outside.json", "only a plain relative path inside the run's folder"),
    ("run.blobs/other.json", "not 'run.blobs/"),
])
def test_H11_replay_refuses_blob_names_outside_the_runs_blobs(run: Run, name: str, expected: str) -> None:
    run.edit_notebook(_blob_named(name))
    done = bounded(cli("replay", str(run.notebook), timeout=120))
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert "cell 1, call #1 (ledger)" in done.stderr and "cell 1:" not in done.stdout


def _calls_not_a_list(nb: dict) -> None:
    nb["cells"][0]["metadata"]["cellgate"]["calls"] = "everything"


def _call_without_seq(nb: dict) -> None:
    del nb["cells"][0]["metadata"]["cellgate"]["calls"][0]["seq"]


@pytest.mark.parametrize("damage", [_calls_not_a_list, _call_without_seq])
def test_H11_malformed_call_metadata_is_a_clear_error_not_a_crash(run: Run, damage) -> None:
    run.edit_notebook(damage)
    done = bounded(cli("replay", str(run.notebook), timeout=120))
    assert done.returncode == 2 and "cell 1's metadata.cellgate is malformed" in done.stderr, done.stderr


@pytest.mark.parametrize(("attack", "expected"), [
    (_symlink_to("/dev/zero"), "is a symlink or not a folder"),
    (_symlink_to("/etc/hostname"), "is a symlink or not a folder"),
    (_fifo, "is a FIFO, not a regular file"),
    (_zero_device, "is a character device, not a regular file"),
    (_sparse, "is larger than"),
])
def test_H11_a_hostile_blob_file_is_refused_by_replay_and_verify(run: Run, attack, expected: str) -> None:
    attack(run.blob())
    for command in ("replay", "verify"):
        done = bounded(cli(command, str(run.notebook), timeout=120))
        assert done.returncode == (2 if command == "replay" else 1), done.stdout + done.stderr
        assert expected in done.stderr and "call #1 (ledger)" in done.stderr, done.stderr


def test_H11_a_blob_folder_that_is_a_symlink_out_is_refused(run: Run, tmp_path: Path) -> None:
    blobs = run.folder / "run.blobs"
    outside = tmp_path / "elsewhere"
    blobs.rename(outside)
    blobs.symlink_to(outside)
    for command in ("replay", "verify"):
        done = bounded(cli(command, str(run.notebook), timeout=120))
        assert done.returncode in (1, 2) and "run.blobs in" in done.stderr, done.stderr
        assert "is a symlink or not a folder" in done.stderr


@pytest.mark.parametrize(("name", "expected"), [
    ("/dev/zero", "a journal must be a <name>.journal.jsonl file beside the notebook"),
    ("../other/run.journal.jsonl", "a journal must be a <name>.journal.jsonl file beside the notebook"),
    ("run.journal.jsonl/../../x.journal.jsonl", "a journal must be a <name>.journal.jsonl file beside the notebook"),
])
def test_H11_verify_refuses_journal_names_outside_the_folder(run: Run, name: str, expected: str) -> None:
    run.edit_notebook(lambda nb: nb["metadata"]["cellgate"]["journal"].update(file=name))
    done = bounded(cli("verify", str(run.notebook), timeout=120))
    assert done.returncode == 1 and expected in done.stderr, done.stderr


@pytest.mark.parametrize(("attack", "expected"), [
    (_symlink_to("/dev/zero"), "is a symlink or not a folder"),
    (_fifo, "is a FIFO, not a regular file"),
    (_zero_device, "is a character device, not a regular file"),
    (_sparse, "is longer than 67,108,864 bytes"),
])
def test_H11_a_hostile_journal_file_gets_a_clear_error_in_bounded_memory(run: Run, attack, expected: str) -> None:
    whole = len(read_journal(run.journal).records)
    attack(run.journal)
    done = bounded(cli("verify", str(run.notebook), timeout=120))
    assert done.returncode == 1 and expected in done.stderr, done.stderr
    done = bounded(cli("recover", str(run.journal), "-o", str(run.folder / "again.ipynb"), timeout=120))
    if attack is _sparse:  # the records before the damage are recovered; the damage is named
        assert done.returncode == 0 and f"stopped at a damaged record: journal record {whole + 1} is longer than" \
            in done.stderr, done.stdout + done.stderr
    else:
        assert done.returncode == 2 and "not a regular file" in done.stderr, done.stdout + done.stderr


# ---------------------------------------------------------------- H12: verify completeness and keyed integrity

def render(journal: Path, notebook: Path, upto: int | None = None) -> None:
    """What a forger without the key can do: render a notebook from (part of) a journal."""
    reducer = Reducer()
    for record in read_journal(journal).records[:upto]:
        reducer.apply(record)
    nbformat.write(reducer.notebook(journal.name), notebook)


def test_H12_a_notebook_rendered_from_a_prefix_of_its_journal_fails(run: Run) -> None:
    records = read_journal(run.journal).records
    first_end = next(r["seq"] for r in records if r["event"] == "cell-ended")
    render(run.journal, run.notebook, upto=first_end)
    done = bounded(cli("verify", str(run.notebook)))
    assert done.returncode == 1
    assert (f"the journal has {len(records) - first_end} records after the notebook's last position "
            f"(record {first_end})") in done.stderr and "run `cellgate recover" in done.stderr
    # Cutting the journal there too: a run that does not end is not a whole run.
    lines = run.journal.read_text().splitlines(keepends=True)
    run.journal.write_text("".join(lines[:first_end]))
    done = bounded(cli("verify", str(run.notebook)))
    assert done.returncode == 1 and f"the journal ends at record {first_end} (cell-ended) without a " \
                                    "session-ended or recovered record" in done.stderr


def test_H12_a_swapped_blob_fails_verify_and_replay_names_the_call(run: Run) -> None:
    blob = run.blob()
    swapped = json.dumps([{"row": n, "amount": n * 4} for n in range(300)], separators=(",", ":"))
    blob.write_text(swapped)
    for command, code in (("verify", 1), ("replay", 2)):
        done = bounded(cli(command, str(run.notebook), timeout=120))
        assert done.returncode == code, done.stdout + done.stderr
        assert "call #1 (ledger)" in done.stderr and "it was replaced or damaged" in done.stderr, done.stderr
    assert "replay refuses to answer from it" in done.stderr


def _rehash(journal: Path, change, keep_macs: bool) -> int:
    """Edit records, then recompute every hash and link as a forger would; returns the first edited seq."""
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    prev, first = "0" * 64, 0
    for record in records:
        before = json.dumps(record, sort_keys=True)
        change(record)
        if json.dumps(record, sort_keys=True) != before and not first:
            first = record["seq"]
        record["prev"] = prev
        record["hash"] = prev = record_hash(record)
        if not keep_macs:
            record.pop("mac", None)
    journal.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return first


def _charge_six(record: dict) -> None:
    if record["event"] in ("call-started", "call-finished") and record["call"]["tool"] == "charge":
        record["call"]["args"] = {"amount": 6}


@pytest.mark.parametrize("keep_macs", [True, False])
def test_H12_a_rehashed_edit_without_the_key_fails(run: Run, keep_macs: bool) -> None:
    first = _rehash(run.journal, _charge_six, keep_macs)
    render(run.journal, run.notebook)
    assert read_journal(run.journal).problem is None  # the hash chain alone is whole again
    done = bounded(cli("verify", str(run.notebook)))
    assert done.returncode == 1, done.stdout
    if keep_macs:
        assert f"journal record {first} (seq {first}) is not signed by this host's key" in done.stderr
    else:
        assert "journal record 1 (seq 1) is not signed: the journal was written without keyed integrity" \
               in done.stderr


def test_H12_verify_names_both_keys_when_the_run_was_signed_elsewhere(run: Run, tmp_path: Path) -> None:
    mine = hostkey.load()
    folder = tmp_path / "other-key"
    folder.mkdir(mode=0o700)
    other = hostkey.load(folder / "host.key")
    done = bounded(cli("verify", str(run.notebook), env={"CELLGATE_HOST_KEY": str(other.path)}))
    assert done.returncode == 1
    assert f"the journal is signed with host key {mine.key_id}; this host's key is {other.key_id}" in done.stderr
    done = bounded(cli("verify", str(run.notebook)))
    assert done.returncode == 0 and f"signed with this host's key {mine.key_id}" in done.stdout


def test_H12_a_killed_run_with_no_cells_and_a_running_one_in_its_journal_fails(tmp_path: Path, runsc: object) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(tools.charge(7))")
    notebook = tmp_path / "run.ipynb"
    done = cli("exec", str(program), "--tools", str(COUNTED), "--notebook", str(notebook),
               env={"CELLGATE_TEST_COUNT_FILE": str(tmp_path / "count"), "CELLGATE_FAILPOINT": "after-intent"})
    assert done.returncode == -9
    assert nbformat.read(notebook, as_version=4).cells == []
    events = [r["event"] for r in read_journal(tmp_path / "run.journal.jsonl").records]
    assert "cell-sent" in events and "call-started" in events
    done = bounded(cli("verify", str(notebook)))
    assert done.returncode == 1
    assert "records after the notebook's last position" in done.stderr and "cellgate recover" in done.stderr
    assert cli("recover", str(tmp_path / "run.journal.jsonl")).returncode == 0
    done = bounded(cli("verify", str(notebook)))
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------- H16: looking does not break verifying

def _as_javascript_would(value):
    """JSON.parse then JSON.stringify: an integral float loses its fraction (300.0 -> 300)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _as_javascript_would(v) for k, v in reversed(list(value.items()))}  # and key order changes
    if isinstance(value, list):
        return [_as_javascript_would(v) for v in value]
    return value


def jupyterlab_save(path: Path) -> None:
    """What JupyterLab does to a notebook it opens and autosaves (simulated here; the real-browser test is
    tests/sandbox/test_frontends' job): numbers re-serialised, language_info and kernelspec filled in, cell UI
    metadata added, sources as one string, another indentation, no trailing newline."""
    nb = _as_javascript_would(json.loads(path.read_text()))
    nb["metadata"]["language_info"] = {
        "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py", "mimetype": "text/x-python",
        "name": "python", "nbconvert_exporter": "python", "pygments_lexer": "ipython3", "version": "3.11.2"}
    nb["metadata"]["kernelspec"] = {"display_name": "cellgate", "language": "python", "name": "cellgate"}
    for cell in nb["cells"]:
        cell["metadata"].update(trusted=True, collapsed=False, jupyter={"source_hidden": False},
                                execution={"iopub.status.busy": "2026-11-30T12:00:00.000Z"})
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
    path.write_text(json.dumps(nb, indent=2, ensure_ascii=True))


def nbformat_round_trip(path: Path, how: str) -> None:
    nb = nbformat.read(path, as_version=4)
    if how == "v3 and back":
        nb = nbformat.convert(nbformat.convert(nb, 3), 4)
    elif how == "4.4 (no cell ids)":
        nb.nbformat_minor = 4
        for cell in nb.cells:
            cell.pop("id", None)
    nbformat.write(nb, path)


@pytest.mark.parametrize("how", ["jupyterlab save", "nbformat 4", "v3 and back", "4.4 (no cell ids)"])
def test_H16_saving_in_a_frontend_keeps_the_run_verifiable(run: Run, how: str) -> None:
    before = run.notebook.read_text()
    if how == "jupyterlab save":
        jupyterlab_save(run.notebook)
        saved = run.notebook.read_text()
        assert '"cell_timeout_s": 600.0' in before and '"cell_timeout_s": 600.0' not in saved
        assert '"cell_timeout_s": 600' in saved and '"language_info"' in saved
    else:
        nbformat_round_trip(run.notebook, how)
    assert run.notebook.read_text() != before
    done = bounded(cli("verify", str(run.notebook)))
    assert done.returncode == 0, done.stderr


def _edit_output(nb: dict) -> None:
    output = nb["cells"][0]["outputs"][0]
    output["text"] = "".join(output["text"]).replace("300", "301")


def _edit_decision(nb: dict) -> None:
    nb["cells"][1]["metadata"]["cellgate"]["calls"][0]["decision"] = "deny"


def _edit_source(nb: dict) -> None:
    nb["cells"][1]["source"] = nb["cells"][1]["source"].replace("charge(5)", "charge(50)")


def _edit_metadata(nb: dict) -> None:
    nb["metadata"]["cellgate"]["sandbox"]["limits"]["memory_mb"] = 2048


def _edit_result(nb: dict) -> None:
    nb["cells"][1]["metadata"]["cellgate"]["calls"][0]["result"] = "charged 6"


def _edit_count(nb: dict) -> None:
    nb["cells"][1]["execution_count"] = 7


@pytest.mark.parametrize(("edit", "place"), [
    (_edit_output, "cell 1 differs from the journal in its outputs"),
    (_edit_decision, "cell 2 differs from the journal in its calls"),
    (_edit_result, "cell 2 differs from the journal in its calls"),
    (_edit_source, "cell 2 differs from the journal in its source"),
    (_edit_count, "cell 2 differs from the journal in its execution_count"),
    (_edit_metadata, "the notebook's metadata.cellgate differs from the journal"),
])
def test_H16_after_a_frontend_save_any_real_change_still_fails(run: Run, edit, place: str) -> None:
    jupyterlab_save(run.notebook)
    run.edit_notebook(edit)
    done = bounded(cli("verify", str(run.notebook)))
    assert done.returncode == 1 and place in done.stderr, done.stderr
