"""Files moved in and out of the sandbox for the host (``Session.upload`` / ``download``), as binary comm buffers.

The host's requests arrive on the control channel as ``comm_msg`` with comm id ``wire.FILES_COMM`` (handled on
the control thread, in order); the answers leave on IOPub on a comm this module opens with target
``wire.FILES_TARGET``. File bytes are buffers of at most ``wire.FILE_CHUNK_BYTES``, never JSON text::

    host:   {"op": "upload-begin", "id", "path", "size", "sha256", "roots"}
            {"op": "upload-chunk", "id", "offset"} + one buffer      (in order)
            {"op": "upload-end", "id"}
            {"op": "download", "id", "path", "limit", "roots"}
    kernel: {"op": "uploaded", "id", "path", "size", "sha256"}      the file is in place, whole
            {"op": "chunk", "id", "offset"} + one buffer             (in order)
            {"op": "downloaded", "id", "path", "size", "sha256"}
            {"op": "failed", "id", "kind", "message"[, "size"]}      kind: path, too-large, io, protocol

A path is resolved here (relative to the kernel's working folder, symlinks followed) and refused unless it is
inside one of the roots (the sandbox's workspace and temporary folder); the host checks what it is told. An
upload is written to a temporary file beside the target and renamed into place only once its size and sha256
match: it is whole, or not there at all.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from .wire import FILE_CHUNK_BYTES, FILES_TARGET

MAX_PATH_CHARS = 4096


class FileProblem(Exception):
    def __init__(self, kind: str, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.size = size


@dataclass
class _Upload:
    path: str
    size: int
    sha256: str
    fd: int
    temp: str
    written: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)


def default_roots() -> list[str]:
    return [os.path.realpath(os.getcwd()), os.path.realpath(tempfile.gettempdir())]


def resolve(path: object, roots: list[str]) -> str:
    """The real path ``path`` names, refused unless it lies inside one of ``roots``."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS or "\0" in path:
        raise FileProblem("path", f"{str(path)[:200]!r} is not a file path")
    if ".." in PurePosixPath(path).parts:
        raise FileProblem("path", f"{path!r} has a '..' component; name the file inside the workspace directly")
    real = os.path.realpath(os.path.join(os.getcwd(), path))
    if not any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots):
        raise FileProblem("path", f"{path!r} resolves to {real!r}, outside the workspace and temporary folder "
                                  f"({', '.join(roots)})")
    if real in roots:
        raise FileProblem("path", f"{path!r} is the folder {real!r}, not a file in it")
    return real


class FileService:
    """Serves the host's file requests on the kernel's control thread."""

    def __init__(self) -> None:
        self._comm: Any = None
        self._uploads: dict[str, _Upload] = {}

    def forget_comm(self) -> None:
        """A new host serves this kernel (a resumed or forked checkpoint): the next answer opens a comm it sees."""
        self._comm = None

    def _send(self, data: dict[str, Any], buffers: list[Any] | None = None) -> None:
        if self._comm is None or getattr(self._comm, "_closed", False):
            import comm

            self._comm = comm.create_comm(target_name=FILES_TARGET, data={})
        self._comm.send(data, buffers=buffers)

    def handle(self, data: Any, buffers: list[Any]) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return
        request_id = data["id"]
        try:
            roots = data.get("roots")
            roots = [os.path.realpath(str(r)) for r in roots] if isinstance(roots, list) and roots else default_roots()
            op = data.get("op")
            if op == "upload-begin":
                self._begin(request_id, data, roots)
            elif op == "upload-chunk":
                self._chunk(request_id, data, buffers)
            elif op == "upload-end":
                self._end(request_id)
            elif op == "download":
                self._download(request_id, data, roots)
        except FileProblem as problem:
            self._abort(request_id)
            reply: dict[str, Any] = {"op": "failed", "id": request_id, "kind": problem.kind, "message": str(problem)}
            if problem.size is not None:
                reply["size"] = problem.size
            self._send(reply)
        except OSError as exc:
            self._abort(request_id)
            self._send({"op": "failed", "id": request_id, "kind": "io", "message": f"{exc.strerror or exc}"})

    # ---------------------------------------------------------------- upload
    def _begin(self, request_id: str, data: dict[str, Any], roots: list[str]) -> None:
        size, digest = data.get("size"), data.get("sha256")
        if not isinstance(size, int) or size < 0 or not isinstance(digest, str):
            raise FileProblem("protocol", "malformed upload request")
        real = resolve(data.get("path"), roots)
        folder = os.path.dirname(real)
        os.makedirs(folder, exist_ok=True)
        if os.path.realpath(folder) != folder:
            raise FileProblem("path", f"the folder of {real!r} changed while it was made")
        if os.path.isdir(real):
            raise FileProblem("path", f"{real!r} is a folder; name a file")
        fd, temp = tempfile.mkstemp(dir=folder, prefix=".cellgate-upload-")
        self._uploads[request_id] = _Upload(real, size, digest, fd, temp)

    def _chunk(self, request_id: str, data: dict[str, Any], buffers: list[Any]) -> None:
        upload = self._uploads.get(request_id)
        if upload is None:
            return  # already failed and answered
        chunk = memoryview(buffers[0]).cast("B") if buffers else None
        if chunk is None or data.get("offset") != upload.written or upload.written + len(chunk) > upload.size:
            raise FileProblem("protocol", "an upload chunk out of order or past the announced size")
        view = chunk
        while view:
            view = view[os.write(upload.fd, view):]
        upload.hasher.update(chunk)
        upload.written += len(chunk)

    def _end(self, request_id: str) -> None:
        upload = self._uploads.get(request_id)
        if upload is None:
            return
        if upload.written != upload.size or upload.hasher.hexdigest() != upload.sha256:
            raise FileProblem("protocol", f"the upload of {upload.path!r} arrived with {upload.written} bytes and "
                                          f"sha256 {upload.hasher.hexdigest()}, not as announced")
        os.fsync(upload.fd)
        os.fchmod(upload.fd, 0o644)
        os.close(upload.fd)
        upload.fd = -1
        os.replace(upload.temp, upload.path)  # a symlink or file there is replaced, never written through
        del self._uploads[request_id]
        self._send({"op": "uploaded", "id": request_id, "path": upload.path, "size": upload.size,
                    "sha256": upload.sha256})

    def _abort(self, request_id: str) -> None:
        upload = self._uploads.pop(request_id, None)
        if upload is None:
            return
        if upload.fd >= 0:
            os.close(upload.fd)
        try:
            os.unlink(upload.temp)
        except FileNotFoundError:
            pass

    # -------------------------------------------------------------- download
    def _download(self, request_id: str, data: dict[str, Any], roots: list[str]) -> None:
        limit = data.get("limit")
        if not isinstance(limit, int) or limit < 0:
            raise FileProblem("protocol", "malformed download request")
        real = resolve(data.get("path"), roots)
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise FileProblem("path", f"{real!r} does not exist") from None
        except OSError as exc:
            raise FileProblem("path", f"{real!r} cannot be opened: {exc.strerror}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise FileProblem("path", f"{real!r} is not a regular file")
        with os.fdopen(fd, "rb", buffering=0) as handle:
            if info.st_size > limit:
                raise FileProblem("too-large", f"{real!r} is {info.st_size} bytes", size=info.st_size)
            hasher, offset = hashlib.sha256(), 0
            while True:
                chunk = handle.read(min(FILE_CHUNK_BYTES, limit + 1 - offset) or 1)
                if not chunk:
                    break
                if offset + len(chunk) > limit:
                    raise FileProblem("too-large", f"{real!r} grew past the limit while it was read",
                                      size=offset + len(chunk))
                hasher.update(chunk)
                self._send({"op": "chunk", "id": request_id, "offset": offset}, [chunk])
                offset += len(chunk)
        self._send({"op": "downloaded", "id": request_id, "path": real, "size": offset, "sha256": hasher.hexdigest()})
