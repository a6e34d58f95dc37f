"""The server side of the extension, under ``<base_url>/cellgate/``:

- ``GET verify?path=NB``: ``cellgate verify`` on a notebook under the server's root; a run still recorded by a
  live kernel of this server (host state, ``live``) is ``running``, its missing ending not a problem yet;
- ``GET kernel?kernel=ID``: whether that kernel is cellgate's, and the audit notebook its launcher records to
  (``live``), with its path under the server's root when it is there, for a link;
- ``GET blob?path=DIR/RUN.blobs/SHA.json&sha256=SHA&bytes=N``: a result blob from its run's own blob folder,
  read only after its name, size and sha256 check out (the same check ``verify`` makes);
- ``GET approvals?kernel=ID``: the queue approver's pending requests made by that kernel's host process;
- ``POST approvals/ID`` ``{"decision": "allow"|"deny", "args_sha256": ..., "kernel": ID}``: answers one, with
  the same code as ``cellgate approvals``, and only if the request still carries the digest the page showed.

Every path is confined to the server's root (after resolving symlinks). Everything read is a recording of a
sandboxed run: it is returned as data and the page shows it as text.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, NoReturn

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from cellgate.gate import CellgateError
from cellgate.gate.ext import (
    ArtifactError,
    answer_approval,
    blob_text,
    pending_approval,
    pending_approvals,
    sandbox_owner_alive,
    verify_run,
)
from cellgate_jupyterlab.live import live_run, verify_reply

BLOB_TEXT_CHARS = 200_000  # of a blob's indented JSON, what one page shows
_BLOB_NAME = re.compile(r"(?P<run>[^/\0]+)\.blobs/(?P<sha>[0-9a-f]{64})\.json")


class _Handler(APIHandler):
    def fail(self, status: int, message: str) -> NoReturn:
        raise tornado.web.HTTPError(status, reason=message[:300], log_message=message)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = exc.log_message if isinstance(exc, tornado.web.HTTPError) and exc.log_message else self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": message}))

    def confined(self, path: str, what: str) -> Path:
        """``path`` (relative to the server's root) resolved, if it stays under the root; else a 403/404."""
        root = self.root()
        if not path or "\0" in path or path.startswith("/"):
            self.fail(400, f"{what} {path!r} is not a path relative to the server's root")
        try:
            resolved = (root / path).resolve(strict=True)
        except (OSError, RuntimeError):
            self.fail(404, f"{what} {path!r} does not exist under the server's root")
        if not resolved.is_relative_to(root):
            self.fail(403, f"{what} {path!r} is outside the server's root; only files under it are served")
        return resolved

    def root(self) -> Path:
        return Path(self.contents_manager.root_dir).resolve()

    def kernel_manager_of(self, kernel_id: str) -> Any:
        try:
            return self.kernel_manager.get_kernel(kernel_id)
        except KeyError:
            self.fail(404, f"no kernel {kernel_id!r} on this server")

    async def kernel_run(self, kernel_id: str) -> dict[str, Any]:
        """What this server's own state (the kernelspec it started, the connection file it wrote) and the
        launcher's host state say of a kernel's record (``live.live_run``)."""
        manager = self.kernel_manager_of(kernel_id)
        try:
            argv = list(manager.kernel_spec.argv)
        except Exception:  # noqa: BLE001 - a kernelspec removed since: not known to be cellgate's
            argv = []
        connection_file = getattr(manager, "connection_file", None)
        return await asyncio.to_thread(live_run, argv, connection_file if isinstance(connection_file, str) else None,
                                       self.root())

    async def recorded_live(self, notebook: Path) -> bool:
        """Whether a live cellgate kernel of this server is recording to ``notebook`` (host state only)."""
        for kernel_id in list(self.kernel_manager.list_kernel_ids()):
            try:
                manager: Any = self.kernel_manager.get_kernel(kernel_id)  # jupyter_server's: async is_alive
                if not await manager.is_alive():
                    continue
            except KeyError:  # shut down meanwhile
                continue
            run = await self.kernel_run(kernel_id)
            if run.get("state") == "running" and Path(run["notebook"]).resolve() == notebook:
                return True
        return False

    def kernel_pid(self, kernel_id: str) -> int:
        manager = self.kernel_manager_of(kernel_id)
        pid = getattr(getattr(manager, "provisioner", None), "pid", None)
        if not isinstance(pid, int):
            self.fail(409, f"kernel {kernel_id!r} has no local process (not started by this server's provisioner)")
        return pid


class VerifyHandler(_Handler):
    @tornado.web.authenticated
    async def get(self) -> None:
        notebook = self.confined(self.get_query_argument("path", ""), "notebook")
        result = await asyncio.to_thread(verify_run, notebook)
        live = result.unended is not None and await self.recorded_live(notebook)
        self.finish(json.dumps(verify_reply(result, live)))


class KernelHandler(_Handler):
    @tornado.web.authenticated
    async def get(self) -> None:
        self.finish(json.dumps(await self.kernel_run(self.get_query_argument("kernel", ""))))


class BlobHandler(_Handler):
    @tornado.web.authenticated
    async def get(self) -> None:
        path = self.get_query_argument("path", "")
        sha = self.get_query_argument("sha256", "")
        size = self.get_query_argument("bytes", "")
        parts = path.rsplit("/", 2)
        name = "/".join(parts[-2:])
        found = _BLOB_NAME.fullmatch(name)
        if not found or found["sha"] != sha or not size.isdigit():
            self.fail(400, f"{path!r} is not a result blob of a run (<run>.blobs/<sha256>.json with the call's "
                           "sha256 and size)")
        folder = self.confined(parts[0] if len(parts) == 3 else ".", "the run's folder")
        journal = f"{found['run']}.journal.jsonl"
        if not (folder / journal).is_file():
            self.fail(404, f"{path!r}: there is no run journal {journal!r} beside it; blobs are served from a run's "
                           "own blob folder only")
        call = {"result_blob": name, "result_sha256": sha, "result_bytes": int(size)}
        try:
            data = await asyncio.to_thread(blob_text, folder, journal, call, path)
        except ArtifactError as exc:
            self.fail(422, str(exc))
        try:
            text = json.dumps(json.loads(data), indent=1, ensure_ascii=False)
        except ValueError:
            text = data.decode("utf-8", "replace")
        self.finish(json.dumps({"text": text[:BLOB_TEXT_CHARS], "truncated": len(text) > BLOB_TEXT_CHARS,
                                "bytes": len(data)}))


def _requests_of(pid: int) -> list[dict[str, Any]]:
    mine = []
    for request in pending_approvals():
        owner = request.get("owner")
        if isinstance(owner, dict) and owner.get("pid") == pid and sandbox_owner_alive(owner):
            mine.append(request)
    return mine


_SHOWN = ("id", "session", "seq", "tool", "args", "args_sha256", "cell_line", "source_line", "requested", "deadline")


class ApprovalsHandler(_Handler):
    @tornado.web.authenticated
    async def get(self) -> None:
        pid = self.kernel_pid(self.get_query_argument("kernel", ""))
        requests = await asyncio.to_thread(_requests_of, pid)
        self.finish(json.dumps({"requests": [{key: r.get(key) for key in _SHOWN} for r in requests]}))


class AnswerHandler(_Handler):
    @tornado.web.authenticated
    async def post(self, request_id: str) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("decision") not in ("allow", "deny") \
                or not isinstance(body.get("args_sha256"), str) or not isinstance(body.get("kernel"), str):
            self.fail(400, 'the body must be {"decision": "allow"|"deny", "args_sha256": ..., "kernel": ...}')
        pid = self.kernel_pid(body["kernel"])
        try:
            request = await asyncio.to_thread(pending_approval, request_id)
            if request_id not in {r.get("id") for r in await asyncio.to_thread(_requests_of, pid)}:
                self.fail(404, f"approval {request_id!r} is not pending for kernel {body['kernel']!r}")
            if request.args_sha256 != body["args_sha256"]:
                self.fail(409, f"approval {request_id!r} now has arguments with sha256 {request.args_sha256[:16]}…, "
                               f"not the {body['args_sha256'][:16]}… shown; reload the list and look again")
            answered = await asyncio.to_thread(answer_approval, request_id, body["decision"], str(body.get("reason", ""))[:500])
        except CellgateError as exc:
            self.fail(409, str(exc))
        self.finish(json.dumps({"answered": request_id, "decision": body["decision"],
                                "tool": answered.get("tool"), "args_sha256": answered.get("args_sha256")}))


def setup_handlers(web_app: Any) -> None:
    base = url_path_join(web_app.settings["base_url"], "cellgate")
    web_app.add_handlers(".*$", [
        (url_path_join(base, "verify"), VerifyHandler),
        (url_path_join(base, "blob"), BlobHandler),
        (url_path_join(base, "kernel"), KernelHandler),
        (url_path_join(base, "approvals"), ApprovalsHandler),
        (url_path_join(base, "approvals", r"([A-Za-z0-9_-]{1,100})"), AnswerHandler),
    ])
