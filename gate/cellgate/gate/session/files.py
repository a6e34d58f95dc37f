"""``Session.upload`` / ``download``: files moved in and out of the sandbox as binary comm buffers, each recorded.

The bytes never pass through a cell's output or the notebook: the host sends its requests to the kernel on the
control channel as ``comm_msg`` (comm id ``wire.FILES_COMM``), file bytes as buffers of ``wire.FILE_CHUNK_BYTES``
at most, and the kernel (``cellgate.kernel.files``) answers on IOPub on a comm of target ``wire.FILES_TARGET``
(``FileRelay``, on the relay's loop; the protocol is drawn in the kernel module). Bounds:

- a file over ``[sandbox] file_limit_mb`` is refused before anything is sent (an upload) or read (a download;
  the host also stops taking chunks past it): ``FileTooLarge`` names the file, its size and the limit;
- a path is checked here (no NUL, no ``..``; absolute only inside the workspace or the temporary folder), then
  resolved by the kernel, which reports the real path; the host checks that report as the hostile claim it is;
- an upload is written to a temporary file and renamed into place only when whole (size and sha256 checked by
  the kernel); a download's size and sha256 are computed by the host from the bytes it got.

Each file moved is a journal record (``file-uploaded``, ``file-downloaded``: path, size, sha256, blob) written
only after the move succeeded, its bytes kept as a blob (``audit.blobs``), so ``cellgate replay`` puts an
uploaded file back before the cell that came after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

from cellgate.gate._errors import FileRefused, FileTooLarge, SessionError
from cellgate.gate.sandbox.environment import WORKSPACE
from cellgate.kernel.wire import FILE_CHUNK_BYTES, FILES_COMM

if TYPE_CHECKING:
    from cellgate.gate.audit.recorder import Recorder
    from cellgate.gate.config import Settings
    from cellgate.gate.session.events import RelayEvents
    from cellgate.gate.session.kernel.watch import KernelWatch

SANDBOX_ROOTS = (WORKSPACE, "/tmp")
MAX_PATH_CHARS = 4096
MAX_MESSAGE_CHARS = 500
_DIGEST = re.compile(r"^[0-9a-f]{64}\Z")  # \Z: "$" would let a trailing newline through
_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f`]+\Z")  # a path a notebook shows in a code span: one line, no backtick
FILE_EVENTS = ("file-uploaded", "file-downloaded")


class _Cells(Protocol):
    def running(self) -> object: ...


class _Relay(Protocol):
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...
    @property
    def files(self) -> FileRelay: ...
    @property
    def cells(self) -> _Cells: ...


class Started(Protocol):
    """What of a started session this needs (``session.provisioner.Started``; not imported: it imports the relay,
    which imports this)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def recorder(self) -> Recorder: ...
    @property
    def service(self) -> _Relay: ...


@dataclass(frozen=True)
class FileRecord:
    """A file moved into the sandbox: where it is (the real path the kernel reported), its size and sha256."""

    path: str
    size: int
    sha256: str


def limit_bytes(started: Started) -> int:
    return int(started.settings.sandbox.file_limit_mb) << 20


def roots(started: Started) -> list[str] | None:
    """The folders a file may be in, as the host knows them; None without a sandbox (the kernel's own)."""
    return None if started.settings.sandbox.isolation == "none" else list(SANDBOX_ROOTS)


def inside(path: str, folders: list[str]) -> bool:
    return any(path.startswith(folder.rstrip("/") + "/") for folder in folders)


def checked_path(path: object, folders: list[str] | None) -> str:
    """A path the caller named, checked before the kernel sees it."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS or not _PRINTABLE.match(path):
        raise FileRefused(f"the file path {str(path)[:200]!r} is not usable: give a non-empty path of at most "
                          f"{MAX_PATH_CHARS} characters, without control characters or backticks")
    if ".." in PurePosixPath(path).parts:
        raise FileRefused(f"the file path {path!r} has a '..' component; name the file inside the sandbox's "
                          "workspace directly (relative to it, or absolute under it)")
    if path.startswith("/") and folders is not None and not inside(path, folders):
        raise FileRefused(f"the file path {path!r} is outside the sandbox's workspace and temporary folder "
                          f"({', '.join(folders)}); use a path relative to the workspace, or under one of them")
    return path


def reported(reply: dict[str, Any], folders: list[str] | None, path: str) -> tuple[str, int, str]:
    """The (path, size, sha256) the kernel reported, refused unless it is well formed and inside ``folders``."""
    real, size, digest = reply.get("path"), reply.get("size"), reply.get("sha256")
    if not isinstance(real, str) or len(real) > MAX_PATH_CHARS or not real.startswith("/") \
            or not _PRINTABLE.match(real) or ".." in PurePosixPath(real).parts \
            or (folders is not None and not inside(real, folders)):
        raise FileRefused(f"the sandbox reported {str(real)[:200]!r} for {path!r}, which is not a path inside its "
                          "workspace or temporary folder; nothing was recorded")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(digest, str) \
            or not _DIGEST.match(digest):
        raise FileRefused(f"the sandbox's report on {path!r} is malformed; nothing was recorded")
    return real, size, digest


def _megabytes(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def too_large(verb: str, path: str, size: int, limit: int) -> FileTooLarge:
    return FileTooLarge(
        f"cannot {verb} {path!r}: it is {size:,} bytes ({_megabytes(size)}), over the limit of {limit:,} bytes "
        f"([sandbox] file_limit_mb = {limit >> 20}); nothing was written. Raise file_limit_mb in cellgate.toml, "
        f"or split the file (or compress it) and move it in parts", path=path, size=size, limit=limit)


@dataclass
class Transfer:
    """One request waiting for the kernel: its answer, and a download's chunks so far."""

    future: asyncio.Future[dict[str, Any]]
    limit: int = 0
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0


class FileRelay:
    """The relay's side of the files protocol (on the relay's loop)."""

    def __init__(self, kernel: KernelWatch, events: RelayEvents) -> None:
        self.kernel = kernel
        self.events = events
        self.comms: set[str] = set()
        self._transfers: dict[str, Transfer] = {}

    # -- what the taps hand over
    def opened(self, comm_id: str) -> None:
        if len(self.comms) < 8:
            self.comms.add(comm_id)
        else:
            self.events.protocol("protocol-error", channel="iopub", error="more than 8 file comms opened; ignored")

    def on_message(self, data: Any, buffers: list[bytes]) -> None:
        """A message of the kernel on a file comm (hostile: matched to a waiting request by its id, bounded)."""
        transfer = self._transfers.get(str(data.get("id"))) if isinstance(data, dict) else None
        if transfer is None or transfer.future.done():
            self.events.protocol("file-message-dropped", reason="no transfer of this session waits for it")
            return
        assert isinstance(data, dict)
        if data.get("op") == "chunk":
            if len(buffers) != 1 or data.get("offset") != transfer.received:
                transfer.future.set_exception(FileRefused("the sandbox sent a file's bytes out of order"))
                return
            chunk = bytes(buffers[0])
            transfer.received += len(chunk)
            if transfer.received > transfer.limit:  # whatever the kernel said of the size: not held past the limit
                transfer.chunks.clear()
                transfer.future.set_result({"op": "failed", "kind": "too-large", "size": transfer.received})
                return
            transfer.chunks.append(chunk)
            return
        if buffers:
            transfer.future.set_exception(FileRefused("the sandbox sent bytes where none belong"))
            return
        transfer.future.set_result(data)

    # -- requests
    async def _send(self, data: dict[str, Any], buffers: list[Any] | None = None) -> None:
        control = self.kernel.control
        if control is None or control.closed:
            raise SessionError("the sandboxed kernel is not attached; restart the session")
        msg = self.kernel.session.msg("comm_msg", {"comm_id": FILES_COMM, "data": data})
        # Buffers follow the signed parts, as jupyter_client's own serialize puts them.
        await control.send_multipart([*self.kernel.session.serialize(msg), *(buffers or [])])

    async def _answer(self, transfer: Transfer, request_id: str, timeout: float) -> dict[str, Any]:
        try:
            async with asyncio.timeout(timeout):
                return await transfer.future
        except TimeoutError:
            raise FileRefused(f"the sandbox did not answer a file request within {timeout:g} s; "
                              "the kernel may be busy or gone") from None
        finally:
            self._transfers.pop(request_id, None)

    async def upload(self, path: str, data: bytes, digest: str, folders: list[str] | None,
                     timeout: float) -> dict[str, Any]:
        request_id = secrets.token_hex(16)
        transfer = Transfer(asyncio.get_running_loop().create_future())
        self._transfers[request_id] = transfer
        try:
            await self._send({"op": "upload-begin", "id": request_id, "path": path, "size": len(data),
                              "sha256": digest, "roots": folders})
            view = memoryview(data)
            for offset in range(0, len(data), FILE_CHUNK_BYTES):
                if transfer.future.done():
                    break  # refused already (a path outside, a full disk): its answer says why
                await self._send({"op": "upload-chunk", "id": request_id, "offset": offset},
                                 [view[offset:offset + FILE_CHUNK_BYTES]])
            if not transfer.future.done():
                await self._send({"op": "upload-end", "id": request_id})
        except BaseException:
            self._transfers.pop(request_id, None)
            raise
        return await self._answer(transfer, request_id, timeout)

    async def download(self, path: str, limit: int, folders: list[str] | None,
                       timeout: float) -> tuple[dict[str, Any], bytes]:
        request_id = secrets.token_hex(16)
        transfer = Transfer(asyncio.get_running_loop().create_future(), limit=limit)
        self._transfers[request_id] = transfer
        try:
            await self._send({"op": "download", "id": request_id, "path": path, "limit": limit, "roots": folders})
        except BaseException:
            self._transfers.pop(request_id, None)
            raise
        answer = await self._answer(transfer, request_id, timeout)
        return answer, b"".join(transfer.chunks)


def _failure(verb: str, path: str, answer: dict[str, Any], limit: int) -> Exception | None:
    if answer.get("op") not in ("failed", "uploaded", "downloaded"):
        return FileRefused(f"the sandbox answered the {verb} of {path!r} with {str(answer.get('op'))[:40]!r}")
    if answer.get("op") != "failed":
        return None
    size = answer.get("size")
    if answer.get("kind") == "too-large" and isinstance(size, int) and not isinstance(size, bool):
        return too_large(verb, path, size, limit)
    message = str(answer.get("message", ""))[:MAX_MESSAGE_CHARS].replace("\n", " ")
    return FileRefused(f"the sandbox refused the {verb} of {path!r}: {message}; nothing was recorded")


def _relay_call(started: Started, coro: Any) -> asyncio.Future[Any]:
    relay = started.service
    if relay.loop is None:
        coro.close()  # never awaited: closed here, not left for the garbage collector to warn of
        raise SessionError("the session's relay is not running; start the session")

    async def when_idle() -> Any:
        if relay.cells.running() is not None:
            coro.close()
            raise SessionError("files cannot be moved while a cell is running; wait for the cell to end")
        return await coro

    return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(when_idle(), relay.loop))


async def upload(started: Started, path: str, data: bytes) -> FileRecord:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise FileRefused(f"upload of {path!r} takes the file's content as bytes, not {type(data).__name__}; "
                          "encode text first (text.encode())")
    data = bytes(data)
    limit = limit_bytes(started)
    if len(data) > limit:
        raise too_large("upload", str(path), len(data), limit)
    folders = roots(started)
    asked = checked_path(path, folders)
    digest = hashlib.sha256(data).hexdigest()
    timeout = started.settings.sandbox.cell_timeout
    answer = await _relay_call(started, started.service.files.upload(asked, data, digest, folders, timeout))
    failure = _failure("upload", asked, answer, limit)
    if failure is not None:
        raise failure
    real, size, got = reported(answer, folders, asked)
    if size != len(data) or got != digest:
        raise FileRefused(f"the sandbox reported {size} bytes with sha256 {got} for {asked!r}, not what was sent")
    await _record(started, "file-uploaded", asked, real, data, digest)
    return FileRecord(path=real, size=size, sha256=digest)


async def download(started: Started, path: str) -> bytes:
    data: bytes
    limit = limit_bytes(started)
    folders = roots(started)
    asked = checked_path(path, folders)
    timeout = started.settings.sandbox.cell_timeout
    answer, data = await _relay_call(started, started.service.files.download(asked, limit, folders, timeout))
    failure = _failure("download", asked, answer, limit)
    if failure is not None:
        raise failure
    real, size, claimed = reported(answer, folders, asked)
    digest = hashlib.sha256(data).hexdigest()
    if size != len(data) or claimed != digest:
        raise FileRefused(f"the sandbox sent {len(data)} bytes hashing to {digest} for {asked!r} but reported "
                          f"{size} bytes with sha256 {claimed}; nothing was recorded")
    await _record(started, "file-downloaded", asked, real, data, digest)
    return data


async def _record(started: Started, event: str, asked: str, real: str, data: bytes, digest: str) -> None:
    """The blob first, then its journal record (fsync'd): a record never names a blob that is not there."""
    recorder = started.recorder
    blob = await asyncio.to_thread(recorder.blobs.store_bytes, digest, data)
    recorder.event(event, sync=True, path=asked, resolved=real, size=len(data), sha256=digest, blob=blob)
    recorder.write_notebook()


__all__ = ["FILE_EVENTS", "FileRecord", "FileRelay", "download", "upload"]
