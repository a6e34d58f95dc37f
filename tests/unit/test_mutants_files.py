"""The host's side of Session.upload / download (gate/cellgate/gate/session/files.py): the path checks, the kernel's
report checked as the hostile claim it is, the limits, the relay's matching of answers, and what is recorded. The
relay talks to the real kernel side (``cellgate.kernel.files.FileService``) on real temporary folders through a
stand-in control socket that signs and checks each message with a real jupyter_client Session; a hostile kernel
is a function answering in its place (scripts/mutation files; CONTRIBUTING, "Mutation testing")."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import comm
import pytest
from jupyter_client.session import Session

from cellgate.gate._errors import FileRefused, FileTooLarge, SessionError
from cellgate.gate.audit.blobs import BlobStore
from cellgate.gate.config import Settings
from cellgate.gate.sandbox.settings import SandboxSettings
from cellgate.gate.session import files
from cellgate.gate.session.files import (
    FILE_EVENTS,
    MAX_MESSAGE_CHARS,
    MAX_PATH_CHARS,
    FileRecord,
    FileRelay,
    checked_path,
    inside,
    reported,
    too_large,
)
from cellgate.kernel.files import FileService
from cellgate.kernel.wire import FILE_CHUNK_BYTES, FILES_COMM

MiB = 1 << 20
DIGEST = "a" * 64


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------------- the stand-ins
Peer = Callable[[dict[str, Any], list[bytes]], list[tuple[dict[str, Any], list[bytes]]]]


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def protocol(self, kind: str, **data: Any) -> None:
        self.seen.append((kind, data))


class Control:
    """The control socket: each message is checked with the session's key, recorded and handed to the peer, whose
    answers go to the relay as the taps would hand them over."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.closed = False
        self.sent: list[tuple[dict[str, Any], list[bytes]]] = []
        self.peer: Peer = lambda data, buffers: []
        self.relay: FileRelay | None = None
        self.fail_after_record = False

    async def send_multipart(self, parts: list[Any]) -> None:
        _, rest = self.session.feed_identities([bytes(p) for p in parts])
        msg = self.session.deserialize(rest, content=True)
        assert msg["header"]["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == FILES_COMM
        data, buffers = msg["content"]["data"], [bytes(b) for b in msg["buffers"]]
        if data.get("op") == "upload-chunk":  # the host sends a file's bytes in order, each chunk full but the last
            sent = sum(len(b[0]) for d, b in self.sent if d["op"] == "upload-chunk" and d["id"] == data["id"])
            assert data["offset"] == sent and len(buffers) == 1 and 0 < len(buffers[0]) <= FILE_CHUNK_BYTES
            assert sent % FILE_CHUNK_BYTES == 0, "a chunk after one that was not full"
        self.sent.append((data, buffers))
        if self.fail_after_record:
            raise ConnectionError("the socket broke")
        assert self.relay is not None
        for answer, answer_buffers in self.peer(data, buffers):
            self.relay.on_message(answer, answer_buffers)

    def ops(self) -> list[str]:
        return [data["op"] for data, _ in self.sent]


@dataclass
class Kernel:
    session: Session = field(default_factory=lambda: Session(key=b"secret"))
    control: Control | None = None


def real_kernel(control: Control, monkeypatch: pytest.MonkeyPatch) -> FileService:
    """The kernel's own FileService answering the relay (its comm hands each answer back)."""
    service = FileService()

    class Back:
        _closed = False

        def send(self, data: dict[str, Any], buffers: list[Any] | None = None) -> None:
            assert control.relay is not None
            control.relay.on_message(data, [bytes(b) for b in buffers or []])

    monkeypatch.setattr(comm, "create_comm", lambda **kwargs: Back())

    def peer(data: dict[str, Any], buffers: list[bytes]) -> list[tuple[dict[str, Any], list[bytes]]]:
        service.handle(data, buffers)
        return []

    control.peer = peer
    return service


class Recorder:
    def __init__(self, folder: Path) -> None:
        self.blobs = BlobStore(folder / "run.blobs")
        self.folder = folder
        self.log: list[tuple[str, Any]] = []

    def event(self, event: str, *, sync: bool | None = None, **data: Any) -> None:
        # a record never names a blob that is not there
        assert (self.folder / data["blob"]).is_file()
        self.log.append(("event", (event, sync, data)))

    def write_notebook(self) -> None:
        self.log.append(("notebook", None))


class Cells:
    def __init__(self) -> None:
        self.current: object = None

    def running(self) -> object:
        return self.current


@dataclass
class Relay:
    files: FileRelay
    loop: asyncio.AbstractEventLoop | None
    cells: Cells = field(default_factory=Cells)


@dataclass
class Started:
    settings: Settings
    recorder: Recorder
    service: Relay


def settings(isolation: str = "none", limit_mb: int = 1, timeout: float = 5.0) -> Settings:
    # timeout: a deadline for a kernel that never answers (a mutant that loses an answer fails in 5 s, not 600)
    return Settings(sandbox=SandboxSettings(isolation=isolation, file_limit_mb=limit_mb,  # type: ignore[arg-type]
                                            cell_timeout=timeout))


@dataclass
class World:
    started: Started
    control: Control
    events: Events
    relay: FileRelay
    ws: Path


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.chdir(workspace)
    kernel = Kernel()
    control = Control(kernel.session)
    kernel.control = control
    events = Events()
    relay = FileRelay(kernel, events)  # type: ignore[arg-type]
    control.relay = relay
    real_kernel(control, monkeypatch)
    (tmp_path / "run").mkdir()
    started = Started(settings(), Recorder(tmp_path / "run"), Relay(relay, None))
    return World(started, control, events, relay, workspace)


def go(world: World, coroutine: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    async def main() -> Any:
        world.started.service.loop = asyncio.get_running_loop()
        async with asyncio.timeout(10):  # the test's own deadline: a request without one fails here, never hangs
            return await coroutine()

    return asyncio.run(main())


def upload(world: World, path: Any, data: Any) -> FileRecord:
    return go(world, lambda: files.upload(world.started, path, data))  # type: ignore[arg-type]


def download(world: World, path: Any) -> bytes:
    return go(world, lambda: files.download(world.started, path))  # type: ignore[arg-type]


def refused(call: Callable[[], Any], kind: type[Exception] = FileRefused) -> str:
    with pytest.raises(kind) as caught:
        call()
    return str(caught.value)


# --------------------------------------------------------------------------------------------- the path checks
def test_inside_means_under_a_folder_never_the_folder_or_a_sibling_with_its_prefix() -> None:
    assert inside("/workspace/a", ["/workspace"]) and inside("/workspace/a", ["/workspace/"])
    assert inside("/tmp/x", ["/workspace", "/tmp"]) and inside("/aX/f", ["/aX"])  # only the slash is stripped
    assert not inside("/workspace", ["/workspace"]) and not inside("/workspace2/a", ["/workspace"])
    assert not inside("/etc/x", ["/workspace", "/tmp"]) and not inside("/tmp/x", [])


def test_the_roots_are_the_sandbox_s_workspace_and_tmp_and_none_without_a_sandbox(world: World) -> None:
    assert files.roots(Started(settings("gvisor"), world.started.recorder, world.started.service)) == \
        ["/workspace", "/tmp"]
    assert files.roots(world.started) is None
    assert files.limit_bytes(Started(settings(limit_mb=3), world.started.recorder, world.started.service)) == 3 * MiB
    assert FILE_EVENTS == ("file-uploaded", "file-downloaded")


def test_checked_path_passes_a_usable_path_unchanged() -> None:
    for path in ("f.txt", "a/b..c", "/workspace/x", "/tmp/y", "./x", "a b", "é"):
        assert checked_path(path, ["/workspace", "/tmp"]) == path
    assert checked_path("/etc/x", None) == "/etc/x"  # without a sandbox, the kernel's roots decide
    assert checked_path("x" * MAX_PATH_CHARS, []) == "x" * MAX_PATH_CHARS


@pytest.mark.parametrize("path", [None, 5, b"f", "", "x" * (MAX_PATH_CHARS + 1), "a\0b", "a\nb", "a\x1fb", "a\x7fb",
                                  "a`b", "f\n", "/workspace/f\n"])
def test_checked_path_refuses_an_unusable_path_naming_its_first_200_characters(path: object) -> None:
    message = refused(lambda: checked_path(path, None))
    assert message == (f"the file path {str(path)[:200]!r} is not usable: give a non-empty path of at most 4096 "
                       "characters, without control characters or backticks")
    assert MAX_PATH_CHARS == 4096


def test_checked_path_refuses_a_dotdot_component() -> None:
    assert refused(lambda: checked_path("a/../b", None)) == (
        "the file path 'a/../b' has a '..' component; name the file inside the sandbox's workspace directly "
        "(relative to it, or absolute under it)")
    assert refused(lambda: checked_path("..", ["/tmp"])).startswith("the file path '..' has a '..' component")


def test_checked_path_refuses_an_absolute_path_outside_the_roots() -> None:
    assert refused(lambda: checked_path("/etc/passwd", ["/workspace", "/tmp"])) == (
        "the file path '/etc/passwd' is outside the sandbox's workspace and temporary folder (/workspace, /tmp); "
        "use a path relative to the workspace, or under one of them")
    assert refused(lambda: checked_path("/workspace", ["/workspace"])).endswith("(/workspace); use a path relative "
                                                                              "to the workspace, or under one of them")


REAL = "/workspace/f"


@pytest.mark.parametrize("real", [None, 5, "", "f", "/workspace/a\nb", "/workspace/f\n", "/workspace/a`b", "/workspace/../etc/x",
                                  "/etc/passwd", "/workspace", "/" + "x" * MAX_PATH_CHARS])
def test_a_report_of_a_path_not_inside_is_refused(real: object) -> None:
    message = refused(lambda: reported({"path": real, "size": 1, "sha256": DIGEST}, ["/workspace", "/tmp"], "f"))
    assert message == (f"the sandbox reported {str(real)[:200]!r} for 'f', which is not a path inside its workspace "
                       "or temporary folder; nothing was recorded")


def test_a_report_without_roots_takes_any_absolute_path_and_a_path_of_the_limit() -> None:
    assert reported({"path": "/etc/x", "size": 0, "sha256": DIGEST}, None, "f") == ("/etc/x", 0, DIGEST)
    at = "/" + "x" * (MAX_PATH_CHARS - 1)
    assert reported({"path": at, "size": 7, "sha256": DIGEST}, None, "f") == (at, 7, DIGEST)
    assert reported({"path": "/tmp/a", "size": 1, "sha256": DIGEST}, ["/workspace", "/tmp"], "f")[0] == "/tmp/a"
    assert "not a path inside" in refused(lambda: reported({"path": "/a/../b", "size": 1, "sha256": DIGEST}, None, "f"))
    assert "not a path inside" in refused(lambda: reported({"path": "f", "size": 1, "sha256": DIGEST}, None, "f"))


@pytest.mark.parametrize("size, digest", [(None, DIGEST), ("1", DIGEST), (True, DIGEST), (-1, DIGEST), (1.0, DIGEST),
                                          (1, None), (1, "A" * 64), (1, "a" * 63), (1, "a" * 65), (1, "g" * 64),
                                          (1, DIGEST + "\n")])
def test_a_malformed_report_is_refused(size: object, digest: object) -> None:
    assert refused(lambda: reported({"path": REAL, "size": size, "sha256": digest}, None, "f")) == (
        "the sandbox's report on 'f' is malformed; nothing was recorded")


def test_too_large_names_the_file_its_size_and_the_limit() -> None:
    error = too_large("upload", "big.bin", 3 * MiB + 1, 2 * MiB)
    assert isinstance(error, FileTooLarge) and isinstance(error, SessionError)
    assert (error.path, error.size, error.limit) == ("big.bin", 3 * MiB + 1, 2 * MiB)
    assert str(error) == ("cannot upload 'big.bin': it is 3,145,729 bytes (3.0 MiB), over the limit of 2,097,152 bytes "
                          "([sandbox] file_limit_mb = 2); nothing was written. Raise file_limit_mb in cellgate.toml, "
                          "or split the file (or compress it) and move it in parts")
    assert "(1.5 MiB)" in str(too_large("download", "x", 3 * MiB // 2, MiB))


# -------------------------------------------------------------------------------------------- the kernel's answer
def failure(answer: dict[str, Any], limit: int = MiB) -> Exception | None:
    return files._failure("download", "f", answer, limit)


def test_an_answer_of_another_kind_is_refused_naming_it_shortly() -> None:
    for op in (None, "chunk", "x" * 100):
        error = failure({"op": op})
        assert isinstance(error, FileRefused)
        assert str(error) == f"the sandbox answered the download of 'f' with {str(op)[:40]!r}"
    assert failure({"op": "uploaded"}) is None and failure({"op": "downloaded"}) is None


def test_a_failure_answer_is_refused_with_its_message_bounded_on_one_line() -> None:
    error = failure({"op": "failed", "kind": "path", "message": "no\nsuch"})
    assert isinstance(error, FileRefused) and not isinstance(error, FileTooLarge)
    assert str(error) == "the sandbox refused the download of 'f': no such; nothing was recorded"
    long = failure({"op": "failed", "message": "m" * 600 + "TAIL"})
    assert str(long) == f"the sandbox refused the download of 'f': {'m' * MAX_MESSAGE_CHARS}; nothing was recorded"
    assert MAX_MESSAGE_CHARS == 500
    assert str(failure({"op": "failed"})) == "the sandbox refused the download of 'f': ; nothing was recorded"


def test_a_too_large_answer_is_file_too_large_only_with_an_integer_size() -> None:
    error = failure({"op": "failed", "kind": "too-large", "size": 2 * MiB}, MiB)
    assert isinstance(error, FileTooLarge) and (error.path, error.size, error.limit) == ("f", 2 * MiB, MiB)
    assert str(error).startswith("cannot download 'f': it is 2,097,152 bytes")
    for size in (True, "5", None):
        error = failure({"op": "failed", "kind": "too-large", "size": size, "message": "big"})
        assert type(error) is FileRefused and "refused the download of 'f': big" in str(error)
    assert type(failure({"op": "failed", "kind": "io", "size": 5})) is FileRefused


# ---------------------------------------------------------------------------------------- uploads and downloads
def test_an_upload_puts_the_file_in_place_records_it_and_returns_where_it_is(world: World) -> None:
    data = b"hello world"
    record = upload(world, "sub/h.txt", data)
    target = world.ws / "sub" / "h.txt"
    assert target.read_bytes() == data
    assert record == FileRecord(path=str(target), size=len(data), sha256=sha(data))
    assert world.control.ops() == ["upload-begin", "upload-chunk", "upload-end"]
    begin = world.control.sent[0][0]
    assert begin == {"op": "upload-begin", "id": begin["id"], "path": "sub/h.txt", "size": len(data),
                     "sha256": sha(data), "roots": None}
    assert len(begin["id"]) == 32 and all(d["id"] == begin["id"] for d, _ in world.control.sent)
    assert world.control.sent[1] == ({"op": "upload-chunk", "id": begin["id"], "offset": 0}, [data])
    assert world.control.sent[2] == ({"op": "upload-end", "id": begin["id"]}, [])
    blob = f"run.blobs/{sha(data)}.bin"
    assert (world.started.recorder.folder / blob).read_bytes() == data
    assert world.started.recorder.log == [
        ("event", ("file-uploaded", True, {"path": "sub/h.txt", "resolved": str(target), "size": len(data),
                                           "sha256": sha(data), "blob": blob})),
        ("notebook", None)]


def test_an_upload_of_a_bytearray_or_memoryview_is_its_bytes_and_text_is_refused(world: World) -> None:
    assert upload(world, "a", bytearray(b"ab")).size == 2 and (world.ws / "a").read_bytes() == b"ab"
    assert upload(world, "m", memoryview(b"mv")).sha256 == sha(b"mv")
    assert refused(lambda: upload(world, "t", "text")) == (
        "upload of 't' takes the file's content as bytes, not str; encode text first (text.encode())")
    assert not (world.ws / "t").exists()


def test_an_upload_goes_in_chunks_and_at_the_limit_passes(world: World) -> None:
    world.started.settings = settings(limit_mb=5)
    data = os.urandom(5 * MiB)
    record = upload(world, "big", data)
    assert record.size == 5 * MiB and (world.ws / "big").read_bytes() == data
    chunks = [(d["offset"], len(b[0])) for d, b in world.control.sent if d["op"] == "upload-chunk"]
    assert chunks == [(0, FILE_CHUNK_BYTES), (FILE_CHUNK_BYTES, 5 * MiB - FILE_CHUNK_BYTES)]


def test_an_upload_over_the_limit_is_refused_before_anything_is_sent(world: World) -> None:
    message = refused(lambda: upload(world, "big", b"x" * (MiB + 1)), FileTooLarge)
    assert message.startswith("cannot upload 'big': it is 1,048,577 bytes (1.0 MiB), over the limit of 1,048,576")
    assert world.control.sent == [] and world.started.recorder.log == []


def test_an_upload_checks_the_path_before_sending(world: World) -> None:
    world.started.settings = settings("gvisor")
    assert "outside the sandbox's workspace" in refused(lambda: upload(world, "/etc/x", b"x"))
    assert "'..' component" in refused(lambda: upload(world, "a/../x", b"x"))
    # a trailing newline is a control character too (a notebook's code span shows one line; it would show "f")
    assert "is not usable" in refused(lambda: upload(world, "f\n", b"x"))
    assert world.control.sent == [] and os.listdir(world.ws) == []
    # the sandbox's roots go to the kernel (here /tmp holds the workspace of the test)
    record = upload(world, str(world.ws / "in"), b"x")
    assert record.path == str(world.ws / "in") and world.control.sent[0][0]["roots"] == ["/workspace", "/tmp"]


def test_an_upload_the_kernel_refuses_at_once_sends_no_more_chunks_and_records_nothing(world: World) -> None:
    world.started.settings = settings(limit_mb=8)
    message = refused(lambda: upload(world, "/proc/x", os.urandom(5 * MiB)))
    assert message.startswith("the sandbox refused the upload of '/proc/x': '/proc/x' resolves to '/proc/x', outside")
    assert message.endswith("; nothing was recorded")
    assert world.control.ops() == ["upload-begin"]
    assert world.started.recorder.log == [] and not (world.started.recorder.folder / "run.blobs").exists()


def test_a_download_returns_the_bytes_and_records_them(world: World) -> None:
    data = os.urandom(FILE_CHUNK_BYTES + 10)
    (world.ws / "d.bin").write_bytes(data)
    world.started.settings = settings(limit_mb=5)
    assert download(world, "d.bin") == data
    asked = world.control.sent[0][0]
    assert asked == {"op": "download", "id": asked["id"], "path": "d.bin", "limit": 5 * MiB, "roots": None}
    assert len(asked["id"]) == 32 and world.control.ops() == ["download"]
    assert world.started.recorder.log == [
        ("event", ("file-downloaded", True, {"path": "d.bin", "resolved": str(world.ws / "d.bin"),
                                             "size": len(data), "sha256": sha(data),
                                             "blob": f"run.blobs/{sha(data)}.bin"})),
        ("notebook", None)]


def test_a_download_at_the_limit_passes_and_over_it_is_too_large(world: World) -> None:
    (world.ws / "at").write_bytes(b"a" * MiB)
    assert download(world, "at") == b"a" * MiB
    (world.ws / "over").write_bytes(b"a" * (MiB + 1))
    error = refused(lambda: download(world, "over"), FileTooLarge)
    assert error.startswith("cannot download 'over': it is 1,048,577 bytes")
    assert [e for e, _ in world.started.recorder.log] == ["event", "notebook"]  # the first download only


def test_a_download_refused_by_the_kernel_records_nothing(world: World) -> None:
    os.mkfifo(world.ws / "fifo")
    assert refused(lambda: download(world, "fifo")) == (
        f"the sandbox refused the download of 'fifo': {str(world.ws / 'fifo')!r} is not a regular file; nothing "
        "was recorded")
    world.started.settings = settings("gvisor")
    assert "outside the sandbox's workspace" in refused(lambda: download(world, "/etc/passwd"))
    assert world.control.ops() == ["download"] and world.started.recorder.log == []
    # the sandbox's roots go to the kernel with a download too
    (world.ws / "in").write_bytes(b"in")
    assert download(world, str(world.ws / "in")) == b"in"
    assert world.control.sent[-1][0]["roots"] == ["/workspace", "/tmp"]


# ------------------------------------------------------------------------------------------- a hostile kernel
def answering(world: World, answer: Callable[[dict[str, Any]], list[tuple[dict[str, Any], list[bytes]]]]) -> None:
    def peer(data: dict[str, Any], buffers: list[bytes]) -> list[tuple[dict[str, Any], list[bytes]]]:
        return answer(data) if data["op"] in ("upload-end", "download") else []

    world.control.peer = peer


def test_an_upload_reported_with_another_size_or_digest_is_refused(world: World) -> None:
    for size, digest in ((3, sha(b"abcd")), (4, sha(b"abce"))):  # one of the two wrong is enough
        answering(world, lambda d, s=size, g=digest: [({"op": "uploaded", "id": d["id"], "path": "/tmp/f", "size": s,
                                                        "sha256": g}, [])])
        message = refused(lambda: upload(world, "f", b"abcd"))
        assert message == f"the sandbox reported {size} bytes with sha256 {digest} for 'f', not what was sent"
    answering(world, lambda d: [({"op": "uploaded", "id": d["id"], "path": "/tmp/f", "size": 4,
                                  "sha256": sha(b"abcd")}, [])])
    assert upload(world, "f", b"abcd") == FileRecord("/tmp/f", 4, sha(b"abcd"))
    assert world.relay._transfers == {}
    assert [e[1][0] for e in world.started.recorder.log if e[0] == "event"] == ["file-uploaded"]


def test_an_upload_reported_outside_the_roots_is_refused(world: World) -> None:
    world.started.settings = settings("gvisor")
    answering(world, lambda d: [({"op": "uploaded", "id": d["id"], "path": "/etc/f", "size": 1,
                                  "sha256": sha(b"x")}, [])])
    assert refused(lambda: upload(world, "f", b"x")).startswith("the sandbox reported '/etc/f' for 'f', which is not")
    answering(world, lambda d: [({"op": "uploaded", "id": d["id"], "path": "/tmp/f", "size": 1,
                                  "sha256": "zz"}, [])])
    assert refused(lambda: upload(world, "f", b"x")) == "the sandbox's report on 'f' is malformed; nothing was recorded"
    answering(world, lambda d: [({"op": "downloaded", "id": d["id"], "path": "/workspace", "size": 0,
                                  "sha256": sha(b"")}, [])])
    assert "reported '/workspace' for 'g'" in refused(lambda: download(world, "g"))
    assert world.started.recorder.log == []


def chunk(request: dict[str, Any], offset: int, data: bytes) -> tuple[dict[str, Any], list[bytes]]:
    return {"op": "chunk", "id": request["id"], "offset": offset}, [data]


def done(request: dict[str, Any], size: int, digest: str) -> tuple[dict[str, Any], list[bytes]]:
    return {"op": "downloaded", "id": request["id"], "path": "/tmp/f", "size": size, "sha256": digest}, []


def test_a_too_large_answer_to_an_upload_names_the_limit(world: World) -> None:
    answering(world, lambda d: [({"op": "failed", "id": d["id"], "kind": "too-large", "size": 5 * MiB}, [])])
    assert refused(lambda: upload(world, "f", b"x"), FileTooLarge).startswith(
        "cannot upload 'f': it is 5,242,880 bytes (5.0 MiB), over the limit of 1,048,576 bytes")


def test_a_download_whose_bytes_are_not_what_is_reported_is_refused(world: World) -> None:
    answering(world, lambda d: [chunk(d, 0, b"ab"), chunk(d, 2, b"c"), done(d, 3, sha(b"abd"))])
    assert refused(lambda: download(world, "f")) == (
        f"the sandbox sent 3 bytes hashing to {sha(b'abc')} for 'f' but reported 3 bytes with sha256 {sha(b'abd')}; "
        "nothing was recorded")
    answering(world, lambda d: [chunk(d, 0, b"ab"), done(d, 3, sha(b"ab"))])
    assert "sent 2 bytes hashing to" in refused(lambda: download(world, "f"))
    answering(world, lambda d: [chunk(d, 0, b"ab"), chunk(d, 2, b"c"), done(d, 3, sha(b"abc"))])
    assert download(world, "f") == b"abc"
    assert world.relay._transfers == {}
    assert [e[1][2]["resolved"] for e in world.started.recorder.log if e[0] == "event"] == ["/tmp/f"]


def test_chunks_out_of_order_or_with_other_buffers_are_refused(world: World) -> None:
    cases: list[Callable[[dict[str, Any]], list[tuple[dict[str, Any], list[bytes]]]]] = [
        lambda d: [chunk(d, 1, b"a")],
        lambda d: [chunk(d, 0, b"a"), chunk(d, 0, b"b")],
        lambda d: [({"op": "chunk", "id": d["id"], "offset": 0}, [])],
        lambda d: [({"op": "chunk", "id": d["id"], "offset": 0}, [b"a", b"b"])],
    ]
    for case in cases:
        answering(world, case)
        assert refused(lambda: download(world, "f")) == "the sandbox sent a file's bytes out of order"
    answering(world, lambda d: [({**done(d, 0, sha(b""))[0]}, [b"x"])])
    assert refused(lambda: download(world, "f")) == "the sandbox sent bytes where none belong"
    assert world.started.recorder.log == []


def test_chunks_past_the_limit_are_dropped_and_the_download_is_too_large(world: World) -> None:
    sent: list[int] = []

    def flood(d: dict[str, Any]) -> list[tuple[dict[str, Any], list[bytes]]]:
        sent.append(d["limit"])
        return [chunk(d, 0, b"a" * (MiB - 1)), chunk(d, MiB - 1, b"bb"), done(d, 0, sha(b""))]

    answering(world, flood)
    error = refused(lambda: download(world, "f"), FileTooLarge)
    assert sent == [MiB] and error.startswith("cannot download 'f': it is 1,048,577 bytes")
    # the answer after the limit finds nothing waiting
    assert world.events.seen == [("file-message-dropped", {"reason": "no transfer of this session waits for it"})]
    answering(world, lambda d: [chunk(d, 0, b"a" * (MiB - 1)), chunk(d, MiB - 1, b"b"), done(d, MiB, sha(b""))])
    assert "sent 1048576 bytes hashing to" in refused(lambda: download(world, "f"))  # at the limit: kept


def test_the_relay_s_download_holds_no_chunk_past_the_limit(world: World) -> None:
    answering(world, lambda d: [chunk(d, 0, b"a" * 3), chunk(d, 3, b"b" * 3)])

    async def run() -> tuple[dict[str, Any], bytes]:
        return await world.relay.download("f", 5, None, 5)

    assert go(world, run) == ({"op": "failed", "kind": "too-large", "size": 6}, b"")


def test_messages_for_no_waiting_transfer_are_dropped_and_journaled(world: World) -> None:
    for data in (None, "x", [1], {"op": "chunk"}, {"id": "nope", "op": "downloaded"}):
        world.relay.on_message(data, [])
    assert world.events.seen == [("file-message-dropped", {"reason": "no transfer of this session waits for it"})] * 5


def test_a_kernel_that_does_not_answer_times_out_and_its_late_answer_is_dropped(world: World) -> None:
    world.started.settings = settings(timeout=0.05)
    answering(world, lambda d: [])
    assert refused(lambda: download(world, "f")) == ("the sandbox did not answer a file request within 0.05 s; the "
                                                     "kernel may be busy or gone")
    late = world.control.sent[-1][0]["id"]
    world.relay.on_message({"op": "downloaded", "id": late}, [])
    assert world.events.seen == [("file-message-dropped", {"reason": "no transfer of this session waits for it"})]
    assert world.relay._transfers == {}  # nothing is held for a request that ended
    assert "within 0.05 s" in refused(lambda: upload(world, "f", b"x"))
    assert world.relay._transfers == {}
    world.relay.on_message({"op": "uploaded", "id": world.control.sent[-1][0]["id"]}, [])
    assert len(world.events.seen) == 2


def test_a_request_whose_send_fails_leaves_nothing_waiting(world: World) -> None:
    world.control.fail_after_record = True
    for call in (lambda: upload(world, "f", b"x"), lambda: download(world, "f")):
        with pytest.raises(ConnectionError):
            call()
        world.relay.on_message({"op": "failed", "id": world.control.sent[-1][0]["id"]}, [])
    assert len(world.events.seen) == 2 and {kind for kind, _ in world.events.seen} == {"file-message-dropped"}


def test_no_file_moves_without_an_attached_kernel(world: World) -> None:
    assert world.relay.kernel.control is not None
    world.relay.kernel.control.closed = True
    message = "the sandboxed kernel is not attached; restart the session"
    assert refused(lambda: upload(world, "f", b"x"), SessionError) == message
    world.relay.kernel.control = None
    assert refused(lambda: download(world, "f"), SessionError) == message


def test_at_most_8_file_comms_are_taken(world: World) -> None:
    for n in range(10):
        world.relay.opened(f"c{n}")
    assert world.relay.comms == {f"c{n}" for n in range(8)}
    assert world.events.seen == [("protocol-error", {"channel": "iopub",
                                                     "error": "more than 8 file comms opened; ignored"})] * 2


# ------------------------------------------------------------------------------------------------ the relay call
def test_no_file_moves_without_a_running_relay(world: World) -> None:
    async def call() -> None:
        await files.upload(world.started, "f", b"x")

    async def main() -> str:
        with pytest.raises(SessionError) as caught:
            await call()
        return str(caught.value)

    world.started.service.loop = None
    assert asyncio.run(main()) == "the session's relay is not running; start the session"
    assert world.control.sent == []
    # the request made for the relay is closed, never left for the garbage collector to warn of
    request = world.relay.upload("f", b"x", sha(b"x"), None, 5)
    with pytest.raises(SessionError):
        files._relay_call(world.started, request)
    assert inspect.getcoroutinestate(request) == inspect.CORO_CLOSED


def test_no_file_moves_while_a_cell_runs_and_the_request_is_closed_unsent(world: World) -> None:
    world.started.service.cells.current = object()
    requests: list[Coroutine[Any, Any, Any]] = []

    async def main() -> str:
        world.started.service.loop = asyncio.get_running_loop()
        request = world.relay.download("f", 10, None, 5)
        requests.append(request)
        with pytest.raises(SessionError) as caught:
            await files._relay_call(world.started, request)
        return str(caught.value)

    assert asyncio.run(main()) == "files cannot be moved while a cell is running; wait for the cell to end"
    assert inspect.getcoroutinestate(requests[0]) == inspect.CORO_CLOSED
    assert "while a cell is running" in refused(lambda: upload(world, "f", b"x"), SessionError)
    assert world.control.sent == []
