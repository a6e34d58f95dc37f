"""The tools runtime: the comm client that the generated ``tools`` stubs call.

A call opens (once) a comm with target ``wire.COMM_TARGET``, sends the request
as a ``comm_msg`` on IOPub, and waits on a ``concurrent.futures.Future`` that
the kernel's control thread resolves when the host's reply arrives (see
``CellgateKernel``). Sync stubs block on the future; async stubs await it, so
many calls can be in flight at once. Async calls made in one turn of the
event loop (``asyncio.gather``) leave as one batch message: inside gVisor each
message costs more than the gate's work on a call.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import secrets
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, Final

from .errors import ToolError, ToolNotFound, ToolTimeout, ToolUnavailable, ToolValidationError, error_for
from .planned import Planned

try:  # every image has orjson (the kernel's requirements); the host's own interpreter may not
    import orjson
except ModuleNotFoundError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]


def _loads(frame: Any) -> Any:
    """A result frame's JSON (a buffer: memoryview or bytes)."""
    return orjson.loads(frame) if orjson is not None else json.loads(bytes(frame))
from .wire import COMM_TARGET, MAX_BATCH_CALLS, MAX_REQUEST_BYTES, OP_BATCH, OP_CALL


class _Omitted:
    """Default of an optional parameter that has no default value: not sent."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Final = _Omitted()




def _cell_line() -> int | None:
    """The line of the cell that made the call, for the audit trail's provenance."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if "ipykernel_" in name or name.startswith("<ipython-input") or name == "<cell>":
            return frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _cell_id() -> str | None:
    """The msg_id of the cell whose code is running here: in a thread, the cell that started it."""
    header = getattr(sys.stdout, "parent_header", None)
    msg_id = header.get("msg_id") if isinstance(header, dict) else None
    return msg_id if isinstance(msg_id, str) and 0 < len(msg_id) <= 128 else None


class GateClient:
    """Sends tool calls to the host gate and matches replies to waiting callers."""

    def __init__(self, reply_wait: float) -> None:
        # The host enforces the real per-call deadline; this one only keeps a
        # cell from waiting forever if the host never answers.
        self._reply_wait = reply_wait
        self._pending: dict[str, tuple[str, Future[Any] | asyncio.Future[Any]]] = {}
        self._outbox: list[tuple[dict[str, Any], int]] = []
        # Call ids: random per kernel, then counted (a getrandom per call is slow inside gVisor).
        self._id_prefix = secrets.token_hex(8)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._comm: Any = None

    @property
    def comm_id(self) -> str | None:
        return None if self._comm is None else str(self._comm.comm_id)

    def forget_comm(self) -> None:
        """A new host serves this kernel (a resumed or forked checkpoint): the next call opens a comm it sees."""
        self._comm = None

    def _open_comm(self) -> Any:
        # Reuse ipykernel's comm machinery; reopen if a frontend closed ours.
        if self._comm is None or getattr(self._comm, "_closed", False):
            import comm

            self._comm = comm.create_comm(target_name=COMM_TARGET, data={})
        return self._comm

    def _request(self, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The wire request for one call and its encoded size (checked against the limit)."""
        request: dict[str, Any] = {"op": OP_CALL, "id": f"{self._id_prefix}{next(self._ids):016x}", "tool": tool,
                                   "args": args}
        line = _cell_line()
        if line is not None:
            request["line"] = line
        cell = _cell_id()
        if cell is not None:
            request["cell"] = cell
        request["thread"] = threading.current_thread().name[:128]
        try:
            size = len(json.dumps(request, ensure_ascii=False).encode("utf-8"))
        except (TypeError, ValueError) as exc:
            raise ToolValidationError(tool, f"arguments of {tool!r} are not JSON: {exc}") from None
        if size > MAX_REQUEST_BYTES:
            raise ToolValidationError(
                tool, f"arguments of {tool!r} are {size} bytes, over the {MAX_REQUEST_BYTES} byte limit per call; "
                      "pass a smaller value or split the call")
        return request, size

    def submit(self, tool: str, args: dict[str, Any]) -> tuple[str, Future[Any]]:
        """Send one call now; its reply resolves the returned future (from the control thread)."""
        request, _ = self._request(tool, args)
        future: Future[Any] = Future()
        with self._lock:
            self._pending[request["id"]] = (tool, future)
            channel = self._open_comm()
        try:
            channel.send(request)
        except Exception as exc:
            with self._lock:
                self._pending.pop(request["id"], None)
            raise ToolUnavailable(tool, f"could not send the call to the gate: {exc}") from None
        return request["id"], future

    def submit_soon(self, tool: str, args: dict[str, Any]) -> tuple[str, asyncio.Future[Any]]:
        """Queue a call to leave with the others made in this turn of the running event loop."""
        request, size = self._request(tool, args)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self._pending[request["id"]] = (tool, future)
            self._outbox.append((request, size))
            first = len(self._outbox) == 1
        if first:
            loop.call_soon(self._send_outbox)
        return request["id"], future

    def _send_outbox(self) -> None:
        with self._lock:
            queued, self._outbox = self._outbox, []
        for group in _batches(queued):
            message = group[0] if len(group) == 1 else {"op": OP_BATCH, "calls": group}
            try:
                with self._lock:
                    channel = self._open_comm()
                channel.send(message)
            except Exception as exc:
                for request in group:
                    with self._lock:
                        tool, future = self._pending.pop(request["id"], (request["tool"], None))
                    if future is not None and not future.done():
                        future.set_exception(ToolUnavailable(tool, f"could not send the call to the gate: {exc}"))

    # A plain try, not a context manager: contextlib puts the traceback back on the error it re-raises.
    def call(self, tool: str, args: dict[str, Any]) -> Any:
        __tracebackhide__ = True  # IPython's debugger: show the caller's frames, not the runtime's
        call_id, future = self.submit(tool, args)
        try:
            return _decoded(tool, future.result(timeout=self._reply_wait))
        except ToolError as error:
            raise error.with_traceback(None) from None  # not concurrent.futures' frames
        except TimeoutError:
            raise self._no_answer(tool) from None
        finally:
            self._forget(call_id)

    async def acall(self, tool: str, args: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        call_id, future = self.submit_soon(tool, args)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (gh-86296).
            async with asyncio.timeout(self._reply_wait):
                return _decoded(tool, await future)
        except ToolError as error:
            raise error.with_traceback(None) from None
        except TimeoutError:
            raise self._no_answer(tool) from None
        finally:
            self._forget(call_id)

    def _no_answer(self, tool: str) -> ToolTimeout:
        return ToolTimeout(tool, f"no answer from the gate for tool {tool!r} within {self._reply_wait:g} s")

    def _forget(self, call_id: str) -> None:
        with self._lock:
            self._pending.pop(call_id, None)

    def resolve(self, data: Any, frames: list[Any] | None = None) -> None:
        """Deliver a host reply, or a batch of them (called on the kernel's control thread); a large result is
        one of the message's ``frames`` (its JSON), decoded by the caller waiting for it (``_Frame``).

        Replies to async calls reach their event loop in one hand-off per
        batch, so the calls they wake are made in one loop turn and leave as
        one batch again.
        """
        items = data["batch"] if isinstance(data, dict) and isinstance(data.get("batch"), list) else [data]
        by_loop: dict[Any, list[tuple[str, Any, Any]]] = {}
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                continue
            with self._lock:
                entry = self._pending.pop(item["id"], None)
            if entry is None:
                continue
            tool, future = entry
            item = _with_framed_result(item, frames or [])
            if isinstance(future, asyncio.Future):
                by_loop.setdefault(future.get_loop(), []).append((tool, future, item))
            else:
                _settle(tool, future, item)
        for loop, replies in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle_all, replies)
            except RuntimeError:
                pass  # that loop is closed: nobody waits for these any more


def _with_framed_result(item: dict[str, Any], frames: list[Any]) -> dict[str, Any]:
    """The reply with its result read from the frame it names (``wire.RESULT_FRAME_BYTES``)."""
    index = item.get("result_frame")
    if index is None:
        return item
    if not isinstance(index, int) or not 0 <= index < len(frames):
        return {"id": item["id"], "ok": False, "error": {"kind": "failed", "message": "the gate's reply named a "
                                                                                        "result frame it did not send"}}
    return {**item, "result": _Frame(frames[index])}


class _Frame:
    """A result still in its frame's JSON. The caller waiting for it decodes it, on its own thread: the control
    thread stays free, and the objects are made in the heap of the thread that keeps them (glibc's main arena
    for a cell's thread: a 10 MB result decoded there in half the time of the control thread's arena)."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        self.data = data


def _decoded(tool: str, value: Any) -> Any:
    if not isinstance(value, _Frame):
        return value
    try:
        return _loads(value.data)
    except ValueError:  # orjson's and json's decode errors both are
        raise error_for("failed", tool, f"the gate's reply to {tool!r} held a result that is not JSON") from None


def _settle_all(replies: list[tuple[str, Any, Any]]) -> None:
    for tool, future, item in replies:
        _settle(tool, future, item)


def _settle(tool: str, future: Any, data: dict[str, Any]) -> None:
    """Resolve one waiting call with its reply: a result, or the matching ToolError."""
    if future.done():  # cancelled (a timeout) or already answered
        return
    if data.get("ok") is True:
        future.set_result(Planned(tool) if data.get("planned") is True else data.get("result"))
        return
    error = data.get("error")
    if not isinstance(error, dict):
        error = {}
    kind = str(error.get("kind", "failed"))
    message = str(error.get("message", "the gate returned a malformed error"))
    future.set_exception(error_for(kind, tool, message))


# Room for the batch's own fields and the comm message around it.
ENVELOPE_BYTES: Final = 256


def _batches(queued: list[tuple[dict[str, Any], int]]) -> Iterator[list[dict[str, Any]]]:
    """Group requests into batches within the per-message call count and byte limits."""
    group: list[dict[str, Any]] = []
    room = MAX_REQUEST_BYTES - ENVELOPE_BYTES
    for request, size in queued:
        if group and (len(group) == MAX_BATCH_CALLS or size + 2 > room):
            yield group
            group, room = [], MAX_REQUEST_BYTES - ENVELOPE_BYTES
        group.append(request)
        room -= size + 2  # ", " between calls
    if group:
        yield group


_client: GateClient | None = None


def install(client: GateClient) -> None:
    """Make ``client`` the one the generated stubs use (called by the kernel)."""
    global _client
    _client = client


def client() -> GateClient:
    if _client is None:
        raise ToolUnavailable("", "the cellgate tools runtime is not connected to a gate")
    return _client


def _args(params: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in params.items() if value is not OMIT}


def call(tool: str, params: dict[str, Any]) -> Any:
    """Call ``tool`` through the gate and return its result (or raise ``ToolError``)."""
    __tracebackhide__ = True
    return client().call(tool, _args(params))


async def acall(tool: str, params: dict[str, Any]) -> Any:
    """Async twin of ``call``: many can be awaited at once."""
    __tracebackhide__ = True
    return await client().acall(tool, _args(params))


def load_manifest(text: str) -> list[dict[str, Any]]:
    manifest = json.loads(text)
    if not isinstance(manifest, list):
        raise ToolError("", "the tools manifest is malformed")
    return manifest


def search(manifest: list[dict[str, Any]], query: str) -> list[str]:
    """Names and one-line summaries of the tools matching every word of ``query``."""
    words = query.lower().split()
    hits = []
    for tool in manifest:
        summary = str(tool.get("description", "")).strip().splitlines()
        first = summary[0] if summary else ""
        haystack = f"{tool['name']} {tool.get('description', '')}".lower()
        if all(word in haystack for word in words):
            hits.append(f"{tool['name']}: {first}" if first else str(tool["name"]))
    return hits


def describe(manifest: list[dict[str, Any]], signatures: dict[str, str], name: str, package: str = "tools") -> str:
    """The signature and full docstring (its Args too) of one tool, as ``help()`` shows its stub."""
    for tool in manifest:
        if tool["name"] == name:
            stub: Any = sys.modules.get(package)
            for part in name.split("."):
                stub = getattr(stub, part, None)
            doc = inspect.getdoc(stub) if callable(stub) else None
            return f"{name}{signatures[name]}\n\n{doc or tool.get('description', '')}".rstrip()
    known = ", ".join(sorted(t["name"] for t in manifest)) or "none"
    raise ToolNotFound(name, f"no tool named {name!r}; the tools of this session are: {known}")


def missing(module: str, name: str, tools: list[str], why: str = "") -> AttributeError:
    """What ``module.name`` raises for a name the module lacks: ``ToolNotFound`` (an AttributeError) naming the
    tools it has, or a plain AttributeError for a private name (Python's and IPython's probes)."""
    if name.startswith("_"):
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    parts = module.split(".")[1:]  # tools.crm.aio -> crm (no namespace is named aio: stubgen.RESERVED)
    tool = ".".join([*(parts[:-1] if parts[-1:] == ["aio"] else parts), name])
    if why:
        return ToolNotFound(tool, f"no tool named {tool!r}: {why}")
    known = ", ".join(tools) or "none"
    return ToolNotFound(tool, f"no tool named {tool!r} in this session; {module} has: {known} "
                              "(tools.search(query) finds tools by name and description)")
