"""The kernel's side of Session.upload / download (kernel/cellgate/kernel/files.py), on real temporary folders: what
is refused and with which text, what is written where and with which mode, the chunks and the limits. Real files,
symlinks, FIFOs and /proc files (whose size says 0) are the hostile cases; the only stand-in is the comm the
answers leave on (scripts/mutation kernel_files; CONTRIBUTING, "Mutation testing")."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from array import array
from pathlib import Path
from typing import Any

import comm
import pytest

from cellgate.kernel.files import MAX_PATH_CHARS, FileProblem, FileService, default_roots, resolve
from cellgate.kernel.wire import FILE_CHUNK_BYTES, FILES_TARGET


class Answers:
    """The comms the service opens (``comm.create_comm`` is meant to be replaced): every answer it sends."""

    def __init__(self) -> None:
        self.opened: list[dict[str, Any]] = []
        self.sent: list[tuple[dict[str, Any], list[Any] | None]] = []
        self.comms: list[Answers.Comm] = []

    class Comm:
        def __init__(self, answers: Answers) -> None:
            self._answers = answers
            self._closed = False

        def send(self, data: dict[str, Any], buffers: list[Any] | None = None) -> None:
            self._answers.sent.append((data, buffers))

    def create(self, **kwargs: Any) -> Answers.Comm:
        self.opened.append(kwargs)
        self.comms.append(Answers.Comm(self))
        return self.comms[-1]

    def ops(self) -> list[str]:
        return [data["op"] for data, _ in self.sent]


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> Answers:
    got = Answers()
    monkeypatch.setattr(comm, "create_comm", got.create)
    return got


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def problem(path: object, roots: list[str]) -> FileProblem:
    with pytest.raises(FileProblem) as caught:
        resolve(path, roots)
    return caught.value


# ------------------------------------------------------------------------------------------------------- resolve
def test_default_roots_are_the_real_working_folder_and_temporary_folder(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path / "link")
    assert default_roots() == [str((tmp_path / "real").resolve()), os.path.realpath(tempfile.gettempdir())]


def test_resolve_gives_the_real_path_relative_to_the_working_folder(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "alias").symlink_to(root / "sub")
    assert resolve("alias/f.txt", [str(root)]) == str(root / "sub" / "f.txt")
    assert resolve(str(root / "new" / "f"), [str(root)]) == str(root / "new" / "f")


@pytest.mark.parametrize("path", [None, 3, b"f", "", "a\0b"])
def test_resolve_refuses_what_is_not_a_path(root: Path, path: object) -> None:
    got = problem(path, [str(root)])
    assert got.kind == "path" and got.size is None
    assert str(got) == f"{str(path)[:200]!r} is not a file path"


def test_resolve_takes_a_path_of_the_limit_and_refuses_one_over_naming_its_first_200_characters(root: Path) -> None:
    at = "d/" * (MAX_PATH_CHARS // 2 - 1) + "ff"
    assert len(at) == MAX_PATH_CHARS == 4096
    assert resolve(at, [str(root)]) == os.path.join(str(root), at)
    over = at + "f"
    assert str(problem(over, [str(root)])) == f"{over[:200]!r} is not a file path"


def test_resolve_refuses_a_dotdot_component_even_when_it_stays_inside(root: Path) -> None:
    (root / "a").mkdir()
    got = problem("a/../f", [str(root)])
    assert (got.kind, str(got)) == ("path", "'a/../f' has a '..' component; name the file inside the workspace directly")
    assert resolve("a/..f", [str(root)]) == str(root / "a" / "..f")  # a name holding dots is a name


def test_resolve_refuses_a_path_outside_the_roots_naming_where_it_resolves(root: Path, tmp_path: Path) -> None:
    got = problem("/etc/passwd", [str(root), "/var/x"])
    assert got.kind == "path"
    assert str(got) == (f"'/etc/passwd' resolves to '/etc/passwd', outside the workspace and temporary folder "
                        f"({root}, /var/x)")
    # a symlink inside that points outside resolves outside
    (root / "out").symlink_to(tmp_path)
    assert str(problem("out/f", [str(root)])).startswith(f"'out/f' resolves to '{tmp_path}/f', outside")
    # a sibling whose name starts with the root's is not inside it
    (tmp_path / "ws2").mkdir()
    assert problem(str(tmp_path / "ws2" / "f"), [str(root)]).kind == "path"


def test_resolve_checks_every_root_and_a_root_of_slash_holds_everything(root: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    assert resolve(str(other / "f"), [str(root), str(other)]) == str(other / "f")
    assert resolve(str(other / "f"), [str(other) + "/"]) == str(other / "f")
    ends_in_x = tmp_path / "wsX"  # only the slash is stripped from a root's end
    ends_in_x.mkdir()
    assert resolve(str(ends_in_x / "f"), [str(ends_in_x)]) == str(ends_in_x / "f")
    assert resolve("/etc/hostname", ["/"]) == "/etc/hostname"


def test_resolve_refuses_a_root_itself(root: Path) -> None:
    got = problem(".", [str(root)])
    assert (got.kind, str(got)) == ("path", f"'.' is the folder {str(root)!r}, not a file in it")
    assert str(problem(str(root), [str(root)])) == f"{str(root)!r} is the folder {str(root)!r}, not a file in it"


# ------------------------------------------------------------------------------------------------------- handle
def test_a_request_without_a_dict_or_a_string_id_gets_no_answer(root: Path, answers: Answers) -> None:
    service = FileService()
    for data in (None, [1], {"op": "download", "path": "f", "limit": 1}, {"id": 5, "op": "download"}):
        service.handle(data, [])
    service.handle({"id": "x", "op": "nothing"}, [])
    assert answers.sent == [] and answers.opened == []


def test_answers_go_on_one_comm_of_the_files_target_reopened_when_closed_or_forgotten(root: Path,
                                                                                    answers: Answers) -> None:
    service = FileService()
    request = {"id": "r", "op": "download", "path": "missing", "limit": 10}
    service.handle(request, [])
    service.handle(request, [])
    assert answers.opened == [{"target_name": FILES_TARGET, "data": {}}] and len(answers.sent) == 2
    answers.comms[0]._closed = True
    service.handle(request, [])
    assert len(answers.opened) == 2
    service.handle(request, [])
    assert len(answers.opened) == 2
    service.forget_comm()
    service.handle(request, [])
    assert len(answers.opened) == 3 and len(answers.sent) == 5


def upload(service: FileService, path: str, data: bytes, roots: list[str] | None = None,
           chunk: int = FILE_CHUNK_BYTES, request_id: str = "u") -> None:
    service.handle({"op": "upload-begin", "id": request_id, "path": path, "size": len(data), "sha256": sha(data),
                    "roots": roots}, [])
    for offset in range(0, len(data), chunk):
        service.handle({"op": "upload-chunk", "id": request_id, "offset": offset}, [data[offset:offset + chunk]])
    service.handle({"op": "upload-end", "id": request_id}, [])


def test_an_upload_is_renamed_into_place_whole_with_mode_644_and_reported(root: Path, answers: Answers) -> None:
    service = FileService()
    data = b"0123456789" * 3
    upload(service, "deep/er/f.bin", data, [str(root)], chunk=7)
    target = root / "deep" / "er" / "f.bin"
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(target.parent) == ["f.bin"]  # the temporary file was renamed, none is left
    assert answers.sent == [({"op": "uploaded", "id": "u", "path": str(target), "size": 30, "sha256": sha(data)},
                             None)]
    # the upload is over: another end or chunk of the same id is not answered
    service.handle({"op": "upload-end", "id": "u"}, [])
    service.handle({"op": "upload-chunk", "id": "u", "offset": 30}, [b"x"])
    assert len(answers.sent) == 1


def test_an_upload_is_written_to_a_temporary_file_beside_the_target_until_it_ends(root: Path,
                                                                                answers: Answers) -> None:
    service = FileService()
    (root / "f").write_bytes(b"old")
    service.handle({"op": "upload-begin", "id": "u", "path": "f", "size": 3, "sha256": sha(b"new")}, [])
    service.handle({"op": "upload-chunk", "id": "u", "offset": 0}, [b"new"])
    temps = [name for name in os.listdir(root) if name != "f"]
    assert len(temps) == 1 and temps[0].startswith(".cellgate-upload-")
    assert (root / temps[0]).read_bytes() == b"new" and (root / "f").read_bytes() == b"old"
    service.handle({"op": "upload-end", "id": "u"}, [])
    assert os.listdir(root) == ["f"] and (root / "f").read_bytes() == b"new"
    assert answers.ops() == ["uploaded"]


def test_an_empty_upload_makes_an_empty_file(root: Path, answers: Answers) -> None:
    upload(FileService(), "empty", b"")
    assert (root / "empty").read_bytes() == b""
    assert answers.sent[0][0]["size"] == 0 and answers.sent[0][0]["sha256"] == sha(b"")


def test_the_roots_of_a_request_are_made_real_and_without_them_the_defaults_hold(tmp_path: Path, root: Path,
                                                                               answers: Answers) -> None:
    (tmp_path / "alias").symlink_to(root)
    upload(FileService(), str(tmp_path / "alias" / "a"), b"a", [str(tmp_path / "alias")])
    assert answers.sent[-1][0]["path"] == str(root / "a")
    # empty or not a list: the working folder and the temporary folder
    for roots in ([], "/etc", None):
        service = FileService()
        service.handle({"op": "upload-begin", "id": "b", "path": "/etc/cellgate-x", "size": 1, "sha256": sha(b"b"),
                        "roots": roots}, [])
        assert answers.sent[-1][0]["kind"] == "path" and "outside" in answers.sent[-1][0]["message"]
        upload(service, "b", b"b", roots, request_id="b")  # type: ignore[arg-type]
        assert answers.sent[-1][0]["path"] == str(root / "b")
    # roots given: the working folder is not one unless named
    upload(FileService(), "c", b"c", [str(tmp_path / "elsewhere")])
    assert answers.sent[-1][0] == {"op": "failed", "id": "u", "kind": "path", "message":
                                   f"'c' resolves to {str(root / 'c')!r}, outside the workspace and temporary folder "
                                   f"({tmp_path / 'elsewhere'})"}
    assert not (root / "c").exists()


@pytest.mark.parametrize("size, digest", [(None, "0" * 64), ("3", "0" * 64), (-1, "0" * 64), (3, None), (3, 5)])
def test_a_malformed_upload_begin_is_a_protocol_failure(root: Path, answers: Answers, size: object,
                                                        digest: object) -> None:
    FileService().handle({"op": "upload-begin", "id": "u", "path": "f", "size": size, "sha256": digest}, [])
    assert answers.sent == [({"op": "failed", "id": "u", "kind": "protocol", "message": "malformed upload request"},
                             None)]
    assert os.listdir(root) == []


def test_an_upload_onto_a_folder_or_through_a_file_is_refused(root: Path, answers: Answers) -> None:
    (root / "dir").mkdir()
    (root / "file").write_text("x")
    service = FileService()
    service.handle({"op": "upload-begin", "id": "u", "path": "dir", "size": 1, "sha256": sha(b"x")}, [])
    assert answers.sent[-1] == ({"op": "failed", "id": "u", "kind": "path",
                                 "message": f"{str(root / 'dir')!r} is a folder; name a file"}, None)
    service.handle({"op": "upload-begin", "id": "v", "path": "file/inner", "size": 1, "sha256": sha(b"x")}, [])
    assert answers.sent[-1] == ({"op": "failed", "id": "v", "kind": "io", "message": "File exists"}, None)
    assert sorted(os.listdir(root)) == ["dir", "file"] and os.listdir(root / "dir") == []


def test_an_upload_outside_through_a_symlink_writes_nothing(root: Path, tmp_path: Path, answers: Answers) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    upload(FileService(), "link/f", b"x", [str(root)])
    assert answers.ops() == ["failed"] and answers.sent[0][0]["kind"] == "path"
    assert os.listdir(outside) == []


def failed_upload(root: Path, answers: Answers, chunks: list[tuple[object, list[Any]]], size: int = 4,
                  digest: str | None = None) -> dict[str, Any]:
    service = FileService()
    service.handle({"op": "upload-begin", "id": "u", "path": "f", "size": size, "sha256": digest or sha(b"abcd")}, [])
    for offset, buffers in chunks:
        service.handle({"op": "upload-chunk", "id": "u", "offset": offset}, buffers)
    service.handle({"op": "upload-end", "id": "u"}, [])
    assert os.listdir(root) == []  # the temporary file is gone, no target was made
    assert len(answers.sent) == 1
    return answers.sent[0][0]


@pytest.mark.parametrize("chunks", [
    [(0, [])],  # no buffer
    [(1, [b"abcd"])],  # out of order
    [(0, [b"ab"]), (0, [b"cd"])],  # the offset did not move on
    [(0, [b"abcde"])],  # past the announced size
    [(0, [b"ab"]), (2, [b"cde"])],
    [(None, [b"abcd"])],
])
def test_an_upload_chunk_out_of_order_or_past_the_size_fails_the_upload(root: Path, answers: Answers,
                                                                        chunks: list[tuple[object, list[Any]]]) -> None:
    assert failed_upload(root, answers, chunks) == {
        "op": "failed", "id": "u", "kind": "protocol",
        "message": "an upload chunk out of order or past the announced size"}


def test_an_upload_that_ends_short_or_with_another_digest_fails_naming_what_arrived(root: Path,
                                                                                  answers: Answers) -> None:
    short = failed_upload(root, answers, [(0, [b"abc"])])
    assert short == {"op": "failed", "id": "u", "kind": "protocol", "message":
                     f"the upload of {str(root / 'f')!r} arrived with 3 bytes and sha256 {sha(b'abc')}, not as "
                     "announced"}
    answers.sent.clear()
    other = failed_upload(root, answers, [(0, [b"abcd"])], digest=sha(b"abce"))
    assert other["message"] == (f"the upload of {str(root / 'f')!r} arrived with 4 bytes and sha256 {sha(b'abcd')}, "
                                "not as announced")


def test_an_upload_chunk_counts_bytes_whatever_the_buffer_s_item_size(root: Path, answers: Answers) -> None:
    words = array("H", [0x4142, 0x4344])
    data = words.tobytes()
    service = FileService()
    service.handle({"op": "upload-begin", "id": "u", "path": "w", "size": 4, "sha256": sha(data)}, [])
    service.handle({"op": "upload-chunk", "id": "u", "offset": 0}, [memoryview(words)])
    service.handle({"op": "upload-end", "id": "u"}, [])
    assert (root / "w").read_bytes() == data and answers.ops() == ["uploaded"]


def test_a_target_made_a_folder_before_the_end_fails_as_io_and_leaves_no_temporary_file(root: Path,
                                                                                      answers: Answers) -> None:
    service = FileService()
    before = open_fds()
    service.handle({"op": "upload-begin", "id": "u", "path": "f", "size": 1, "sha256": sha(b"x")}, [])
    service.handle({"op": "upload-chunk", "id": "u", "offset": 0}, [b"x"])
    (root / "f").mkdir()
    (root / "f" / "kept").write_text("k")
    service.handle({"op": "upload-end", "id": "u"}, [])  # the file is closed, then the rename fails
    assert open_fds() == before  # its file closed once: no other descriptor closed in its place
    assert answers.sent == [({"op": "failed", "id": "u", "kind": "io", "message": "Is a directory"}, None)]
    assert os.listdir(root) == ["f"] and os.listdir(root / "f") == ["kept"]


def test_a_temporary_file_removed_by_a_cell_fails_the_upload_as_io(root: Path, answers: Answers) -> None:
    service = FileService()
    service.handle({"op": "upload-begin", "id": "u", "path": "f", "size": 1, "sha256": sha(b"x")}, [])
    service.handle({"op": "upload-chunk", "id": "u", "offset": 0}, [b"x"])
    for name in os.listdir(root):
        os.unlink(root / name)
    service.handle({"op": "upload-end", "id": "u"}, [])
    assert answers.sent == [({"op": "failed", "id": "u", "kind": "io", "message": "No such file or directory"},
                             None)]
    assert os.listdir(root) == []


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_failed_upload_closes_its_file(root: Path, answers: Answers) -> None:
    service = FileService()
    before = open_fds()
    service.handle({"op": "upload-begin", "id": "u", "path": "f", "size": 1, "sha256": sha(b"x")}, [])
    assert open_fds() == before + 1
    service.handle({"op": "upload-chunk", "id": "u", "offset": 5}, [b"x"])
    assert open_fds() == before
    upload(service, "g", b"g", request_id="g")
    assert open_fds() == before


# ----------------------------------------------------------------------------------------------------- download
def download(service: FileService, path: str, limit: int, roots: list[str] | None = None) -> None:
    service.handle({"op": "download", "id": "d", "path": path, "limit": limit, "roots": roots}, [])


def test_a_download_sends_the_file_in_chunks_then_its_size_and_digest(root: Path, answers: Answers) -> None:
    data = os.urandom(FILE_CHUNK_BYTES) + b"tail"
    (root / "big").write_bytes(data)
    download(FileService(), "big", len(data))
    assert [(d, buffers and [bytes(b) for b in buffers]) for d, buffers in answers.sent] == [
        ({"op": "chunk", "id": "d", "offset": 0}, [data[:FILE_CHUNK_BYTES]]),
        ({"op": "chunk", "id": "d", "offset": FILE_CHUNK_BYTES}, [b"tail"]),
        ({"op": "downloaded", "id": "d", "path": str(root / "big"), "size": len(data), "sha256": sha(data)}, None),
    ]


def test_a_download_of_an_empty_file_at_a_limit_of_zero(root: Path, answers: Answers) -> None:
    (root / "e").write_bytes(b"")
    download(FileService(), "e", 0)
    assert answers.sent == [({"op": "downloaded", "id": "d", "path": str(root / "e"), "size": 0, "sha256": sha(b"")},
                             None)]


def test_a_download_at_the_limit_passes_and_one_byte_over_is_too_large_before_any_byte(root: Path,
                                                                                     answers: Answers) -> None:
    (root / "f").write_bytes(b"12345")
    download(FileService(), "f", 5)
    assert answers.ops() == ["chunk", "downloaded"]
    answers.sent.clear()
    download(FileService(), "f", 4)
    assert answers.sent == [({"op": "failed", "id": "d", "kind": "too-large",
                              "message": f"{str(root / 'f')!r} is 5 bytes", "size": 5}, None)]


def test_a_file_that_says_it_is_empty_and_is_not_stops_at_the_limit(answers: Answers) -> None:
    data = Path("/proc/version").read_bytes()
    assert os.stat("/proc/version").st_size == 0 and len(data) > 11
    download(FileService(), "/proc/version", 10, ["/proc"])
    assert answers.sent == [({"op": "failed", "id": "d", "kind": "too-large",
                              "message": "'/proc/version' grew past the limit while it was read", "size": 11}, None)]
    answers.sent.clear()
    download(FileService(), "/proc/version", len(data), ["/proc"])
    assert [bytes(b) for _, buffers in answers.sent[:-1] for b in buffers or []] == [data]
    assert answers.sent[-1] == ({"op": "downloaded", "id": "d", "path": "/proc/version", "size": len(data),
                                 "sha256": sha(data)}, None)


@pytest.mark.parametrize("limit", [None, "5", -1, 1.5])
def test_a_malformed_download_is_a_protocol_failure(root: Path, answers: Answers, limit: object) -> None:
    (root / "f").write_bytes(b"x")
    FileService().handle({"op": "download", "id": "d", "path": "f", "limit": limit}, [])
    assert answers.sent == [({"op": "failed", "id": "d", "kind": "protocol", "message": "malformed download request"},
                             None)]


def test_a_download_of_what_is_not_a_regular_file_is_refused(root: Path, answers: Answers) -> None:
    os.mkfifo(root / "fifo")
    (root / "dir").mkdir()
    (root / "loop").symlink_to("loop")
    before = open_fds()
    service = FileService()
    for name in ("missing", "fifo", "dir", "loop"):
        download(service, name, 100)
    assert [d["message"] for d, _ in answers.sent] == [
        f"{str(root / 'missing')!r} does not exist",
        f"{str(root / 'fifo')!r} is not a regular file",  # opened without blocking, refused by its type
        f"{str(root / 'dir')!r} is not a regular file",
        f"{str(root / 'loop')!r} cannot be opened: Too many levels of symbolic links",  # never followed
    ]
    assert {(d["op"], d["kind"]) for d, _ in answers.sent} == {("failed", "path")}
    assert open_fds() == before


def test_a_download_outside_the_roots_reads_nothing(root: Path, tmp_path: Path, answers: Answers) -> None:
    (tmp_path / "secret").write_text("s")
    (root / "s").symlink_to(tmp_path / "secret")
    download(FileService(), "s", 100, [str(root)])
    assert answers.sent == [({"op": "failed", "id": "d", "kind": "path", "message":
                              f"'s' resolves to {str(tmp_path / 'secret')!r}, outside the workspace and temporary "
                              f"folder ({root})"}, None)]


def test_a_failed_upload_closes_its_file_even_as_descriptor_0(root: Path, answers: Answers) -> None:
    saved = os.dup(0)
    os.close(0)
    try:
        service = FileService()
        service.handle({"op": "upload-begin", "id": "u", "path": "f", "size": 1, "sha256": sha(b"x")}, [])
        assert os.readlink("/proc/self/fd/0").startswith(str(root / ".cellgate-upload-"))
        service.handle({"op": "upload-chunk", "id": "u", "offset": 5}, [b"x"])
        with pytest.raises(OSError):
            os.fstat(0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert answers.ops() == ["failed"] and os.listdir(root) == []


def test_a_comm_without_a_closed_flag_is_kept(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []

    class Bare:
        def send(self, data: dict[str, Any], buffers: list[Any] | None = None) -> None:
            pass

    monkeypatch.setattr(comm, "create_comm", lambda **kwargs: opened.append(kwargs) or Bare())
    service = FileService()
    for _ in range(3):
        download(service, "missing", 1)
    assert opened == [{"target_name": FILES_TARGET, "data": {}}]


def test_a_file_that_grows_while_it_is_read_stops_one_byte_past_the_limit(root: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "grows").write_bytes(b"a" * FILE_CHUNK_BYTES)
    sent: list[tuple[dict[str, Any], list[Any] | None]] = []

    class Growing:
        _closed = False

        def send(self, data: dict[str, Any], buffers: list[Any] | None = None) -> None:
            sent.append((data, buffers))
            if data["op"] == "chunk":  # a cell appends while the first chunk is on its way
                with open(root / "grows", "ab") as handle:
                    handle.write(b"b" * 20)

    monkeypatch.setattr(comm, "create_comm", lambda **kwargs: Growing())
    download(FileService(), "grows", FILE_CHUNK_BYTES + 10)
    assert [d for d, _ in sent] == [
        {"op": "chunk", "id": "d", "offset": 0},
        {"op": "failed", "id": "d", "kind": "too-large",
         "message": f"{str(root / 'grows')!r} grew past the limit while it was read", "size": FILE_CHUNK_BYTES + 11}]


# The races a cell can run against the kernel, each put in the one place it could land: between the check of a
# path and its use, a real symlink swapped in (the os call the module makes next is where the swap is done).
def test_a_symlink_swapped_in_after_the_check_is_not_followed_by_a_download(root: Path, tmp_path: Path,
                                                                           answers: Answers,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "secret").write_text("secret")
    (root / "f").write_text("plain")
    real_open = os.open

    def swap_then_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == str(root / "f"):
            os.unlink(path)
            os.symlink(tmp_path / "secret", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    download(FileService(), "f", 100, [str(root)])
    assert answers.sent == [({"op": "failed", "id": "d", "kind": "path", "message":
                              f"{str(root / 'f')!r} cannot be opened: Too many levels of symbolic links"}, None)]


def test_a_folder_swapped_for_a_symlink_while_it_is_made_fails_the_upload(root: Path, tmp_path: Path,
                                                                         answers: Answers,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    real_makedirs = os.makedirs

    def make_then_swap(name: Any, *args: Any, **kwargs: Any) -> None:
        real_makedirs(name, *args, **kwargs)
        if name == str(root / "new"):
            os.rmdir(name)
            os.symlink(outside, name)

    monkeypatch.setattr(os, "makedirs", make_then_swap)
    upload(FileService(), "new/f", b"x", [str(root)])
    assert answers.sent == [({"op": "failed", "id": "u", "kind": "path", "message":
                              f"the folder of {str(root / 'new' / 'f')!r} changed while it was made"}, None)]
    assert os.listdir(outside) == []
