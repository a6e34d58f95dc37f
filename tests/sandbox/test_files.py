"""``Session.upload`` / ``download`` in the real sandbox: bounded, confined, each file a journal record and a blob."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import nbformat
import pytest
from conftest import cellgate

from cellgate.gate import FileRecord, SessionError
from cellgate.gate._errors import FileRefused, FileTooLarge
from cellgate.gate.testing import BlockingSession

MB = 1 << 20


def upload(box: BlockingSession, path: str, data: bytes) -> FileRecord:
    return box._run(box.session.upload(path, data))


def download(box: BlockingSession, path: str) -> bytes:
    return box._run(box.session.download(path))


def records(box: BlockingSession, *events: str) -> list[dict[str, Any]]:
    journal = box.session.recorder.journal.path
    return [r for r in map(json.loads, journal.read_text().splitlines()) if r["event"] in events]


def in_sandbox(box: BlockingSession, code: str) -> str:
    result = box.execute(code)
    assert result.ok, result.text
    return result.stdout


@pytest.fixture(scope="module")
def small(session_factory: Any) -> BlockingSession:
    """A session whose files may be at most 1 MiB."""
    return session_factory(tools=[], file_limit_mb=1)


def test_a_20_mb_file_goes_in_and_out_whole_is_recorded_by_sha256_and_replay_puts_it_back(
        session_factory: Any) -> None:
    box = session_factory(tools=[])
    data = random.Random(31).randbytes(20 * MB)
    digest = hashlib.sha256(data).hexdigest()
    placed = upload(box, "inputs/data.bin", data)
    assert placed == FileRecord(path="/workspace/inputs/data.bin", size=20 * MB, sha256=digest)
    check = "import hashlib; print(hashlib.sha256(open('inputs/data.bin', 'rb').read()).hexdigest())"
    assert in_sandbox(box, check) == digest + "\n"  # the kernel reads the very bytes
    in_sandbox(box, "open('inputs/copy.bin', 'wb').write(open('inputs/data.bin', 'rb').read()[::-1])")
    back = download(box, "inputs/copy.bin")
    assert back == data[::-1]
    uploaded, downloaded = records(box, "file-uploaded"), records(box, "file-downloaded")
    assert [(r["path"], r["resolved"], r["size"], r["sha256"]) for r in uploaded] == [
        ("inputs/data.bin", "/workspace/inputs/data.bin", 20 * MB, digest)]
    assert downloaded[0]["sha256"] == hashlib.sha256(back).hexdigest()
    run_folder = box.session.notebook_path.parent
    assert (run_folder / uploaded[0]["blob"]).read_bytes() == data
    assert (run_folder / downloaded[0]["blob"]).read_bytes() == back
    notebook = box.session.notebook_path
    assert notebook.stat().st_size < 100_000  # no file's bytes in the notebook, as base64 or otherwise
    shown = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown"]
    assert [c.metadata.cellgate["kind"] for c in shown] == ["file-uploaded", "file-downloaded"]
    assert digest in shown[0].source
    box.close()
    assert cellgate("verify", str(notebook)).returncode == 0

    replayed = cellgate("replay", str(notebook))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert f"put back /workspace/inputs/data.bin ({20 * MB:,} bytes, sha256 {digest[:16]}…) before cell 1" \
        in replayed.stdout
    assert "cell 1: recorded ok, replayed ok" in replayed.stdout
    replay_nb = nbformat.read(notebook.with_name(notebook.stem + ".replay.ipynb"), as_version=4)
    first = [c for c in replay_nb.cells if c.cell_type == "code"][0]
    assert first.outputs[0]["text"] == digest + "\n"  # the cell read the file replay put back


def test_an_upload_over_the_limit_is_refused_whole_and_nothing_is_written(small: BlockingSession) -> None:
    with pytest.raises(FileTooLarge) as refused:
        upload(small, "big.bin", b"x" * (MB + 1))
    message = str(refused.value)
    assert "'big.bin'" in message and "1,048,577 bytes" in message and "file_limit_mb = 1" in message
    assert "Raise file_limit_mb" in message
    assert (refused.value.path, refused.value.size, refused.value.limit) == ("big.bin", MB + 1, MB)
    assert isinstance(refused.value, SessionError) and refused.value.code == "file-too-large"  # caught by code
    listing = in_sandbox(small, "import os; print(sorted(os.listdir('.')))")
    assert "big.bin" not in listing and ".cellgate-upload" not in listing
    assert [r for r in records(small, "file-uploaded") if r["path"] == "big.bin"] == []
    assert upload(small, "fits.bin", b"x" * MB).size == MB  # the limit itself fits


def test_a_download_over_the_limit_is_refused_and_nothing_is_recorded(small: BlockingSession) -> None:
    in_sandbox(small, "open('/tmp/large.bin', 'wb').write(b'y' * (2 << 20))")
    with pytest.raises(FileTooLarge) as refused:
        download(small, "/tmp/large.bin")
    message = str(refused.value)
    assert "'/tmp/large.bin'" in message and "2,097,152 bytes" in message and "file_limit_mb = 1" in message
    assert [r for r in records(small, "file-downloaded") if r["path"] == "/tmp/large.bin"] == []
    in_sandbox(small, "open('/tmp/limit.bin', 'wb').write(b'y' * (1 << 20))")
    assert download(small, "/tmp/limit.bin") == b"y" * MB  # the limit itself fits


@pytest.mark.parametrize(("path", "says"), [
    ("../etc/passwd", "'..' component"), ("/etc/passwd", "outside the sandbox's workspace"),
    ("", "not usable"), ("a\nb", "not usable"),
])
def test_paths_outside_the_workspace_are_refused_by_the_host(small: BlockingSession, path: str, says: str) -> None:
    with pytest.raises(FileRefused, match=says):
        upload(small, path, b"x")
    with pytest.raises(FileRefused, match=says):
        download(small, path)


def test_symlinks_the_sandbox_planted_do_not_lead_out(small: BlockingSession) -> None:
    in_sandbox(small, "import os; os.makedirs('planted'); os.chdir('planted'); os.symlink('/etc', 'escape'); "
                      "os.symlink('/etc/hostname', 'host'); os.chdir('..')")
    for path in ("planted/escape/planted", "planted/host"):
        with pytest.raises(FileRefused, match="outside the workspace"):
            upload(small, path, b"x")
    for path in ("planted/escape/passwd", "planted/host"):
        with pytest.raises(FileRefused, match="outside the workspace"):
            download(small, path)
    assert in_sandbox(small, "import os; print(os.path.exists('/etc/planted'))") == "False\n"
    assert [r for r in records(small, "file-uploaded", "file-downloaded") if r["path"].startswith("planted/")] == []


def test_a_missing_file_is_a_clear_refusal(small: BlockingSession) -> None:
    with pytest.raises(FileRefused, match="/workspace/none.bin' does not exist"):
        download(small, "none.bin")


def test_a_folder_is_not_a_file(small: BlockingSession) -> None:
    in_sandbox(small, "import os; os.makedirs('folder/inner')")
    with pytest.raises(FileRefused, match="not a regular file"):
        download(small, "folder")
    with pytest.raises(FileRefused, match="is a folder"):
        upload(small, "folder/inner", b"x")


def test_an_upload_the_sandbox_cannot_hold_leaves_no_partial_file_and_no_record(session_factory: Any) -> None:
    box = session_factory(tools=[], tmp_mb=4, file_limit_mb=16)
    with pytest.raises(FileRefused, match="refused the upload of '/tmp/full.bin'"):
        upload(box, "/tmp/full.bin", b"z" * (8 * MB))  # past /tmp's 4 MiB: the kernel's write fails midway
    assert in_sandbox(box, "import os; print([n for n in os.listdir('/tmp') if 'full' in n or 'cellgate-upload' in n])"
                      ) == "[]\n"
    assert records(box, "file-uploaded") == []
    assert upload(box, "/tmp/fits.bin", b"z" * MB).size == MB  # the session goes on


def test_file_messages_forged_by_code_in_the_sandbox_are_dropped(small: BlockingSession) -> None:
    in_sandbox(small, """
import comm
forged = comm.create_comm(target_name='cellgate.files', data={})
forged.send({'op': 'uploaded', 'id': 'guess', 'path': '/workspace/x', 'size': 1, 'sha256': '0' * 64})
forged.send({'op': 'chunk', 'id': 'guess', 'offset': 0}, buffers=[b'x' * 1000])
""")
    assert upload(small, "after-forgery.bin", b"ok").size == 2
    assert download(small, "after-forgery.bin") == b"ok"
    dropped = records(small, "file-message-dropped")
    assert len(dropped) >= 2
