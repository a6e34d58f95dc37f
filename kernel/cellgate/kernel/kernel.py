"""``CellgateKernel``: the ipykernel that runs inside the sandbox.

Additions to ``IPythonKernel``:

- gate replies arrive as ``comm_msg`` on the **control** channel (the shell
  channel is blocked while a cell runs) and go straight to the tools runtime;
  the host's file requests arrive the same way and go to ``files``;
- the generated ``tools`` package is imported into the user namespace (with ``call_style = "ptc"``, the
  functions of ``tools.ptc`` too);
- stream output is also logged to a host-backed file and IOPub messages are
  numbered, so output survives the kernel's death and losses show (``outlog``);
- in restricted mode (``CELLGATE_RESTRICTED``), cells run under
  RestrictedPython's guards instead of IPython (see ``restricted``);
- debugpy is loaded on the first ``debug_request``, not at start (``lazy_debugger``).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import json
import os
import resource
import sys
import threading
import traceback
from typing import Any

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp
from traitlets import Float
from typing_extensions import override

from . import files, heap, hibernate, lazy_debugger, network_hint, outlog, pip_magic, ptc, runtime, tunnel, wire
from .deadline import DeadlineExpired, deadline
from .framestack import with_roomy_stack

THREAD_STACK_BYTES = 2 << 20


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def apply_memory_limit() -> None:
    """Cap the address space slightly under the sandbox memory limit.

    An over-allocation then fails as ``MemoryError`` inside the cell and the
    kernel survives, instead of the whole sandbox being OOM-killed.
    """
    limit = os.environ.get(wire.ENV_RLIMIT_AS)
    if limit and limit.isdigit():
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
        # Thread stacks reserve address space up front (8 MiB each by default):
        # keep them small so many threads fit under the cap.
        threading.stack_size(THREAD_STACK_BYTES)


def threads_inherit_the_cell() -> None:
    """Run each new thread in a copy of its starter's context (as Python 3.14 can).

    ipykernel keeps the parent header of the running cell in a context
    variable; a thread that inherits it prints as the cell that started it,
    so its output after that cell ended reaches the host as late output of
    that cell, not as output of whichever cell runs then, and its tool calls
    name that cell (the host refuses them once it has ended).
    """
    original_start = threading.Thread.start
    if getattr(original_start, "_cellgate", False):
        return

    def start(thread: threading.Thread) -> None:
        context = contextvars.copy_context()
        run = thread.run
        thread.run = lambda: with_roomy_stack(lambda: context.run(run))  # type: ignore[method-assign]
        original_start(thread)

    start._cellgate = True  # type: ignore[attr-defined]
    threading.Thread.start = start  # type: ignore[method-assign, assignment]


class OutputCap:
    """Drops what one cell prints past a limit, inside the kernel, with one note saying so.

    The host's output cap decides what is recorded; this one only keeps a
    print loop from growing ipykernel's stream buffers until the kernel runs
    out of memory and stops answering.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.written = 0
        self.noted = False

    def new_cell(self) -> None:
        self.written, self.noted = 0, False

    def wrap(self, stream: Any) -> None:
        write = stream.write

        def capped_write(text: str) -> int:
            if self.written > self.limit:
                if not self.noted:
                    self.noted = True
                    write(f"\n[cellgate: this cell printed more than {self.limit} bytes; "
                          "the kernel dropped the rest]\n")
                return len(text)
            self.written += len(text)
            return int(write(text) or 0)

        stream.write = capped_write


def skip_empty_flushes(stream: Any) -> None:
    """Make ``flush()`` of an ipykernel OutStream return at once when it has nothing unsent.

    Its flush from the cell's thread is a round trip to the IOPub thread, made
    several times per cell even when the cell printed nothing; inside gVisor
    each thread hand-off is costly. Text is unsent while it is in the buffer,
    while a send is pending, and while the IOPub thread is inside ``_flush``:
    that has taken the text from the buffer but queues its message only at the
    end (after the hooks, one of which writes the output log). A flush skipped
    then would let the idle status be queued, and sent, before the cell's
    last output.
    """
    if not all(hasattr(stream, name) for name in ("_buffers", "_flush_pending", "_flush")):
        return  # not the OutStream this was written against: keep its own flush
    flush, send = stream.flush, stream._flush
    sending = [0]  # how many _flush calls are running (the IOPub thread's, or a caller's without one)

    def counted_send() -> None:
        sending[0] += 1
        try:
            send()
        finally:
            sending[0] -= 1

    def has_unsent() -> bool:
        return bool(stream._buffers or stream._flush_pending or sending[0])

    def lean_flush() -> None:
        if has_unsent():
            flush()

    stream._flush = counted_send
    stream.flush = lean_flush


lazy_debugger.hold_back()  # before any kernel is made: ipykernel then makes no debugger at start


class CellgateKernel(IPythonKernel):
    # ipykernel sleeps 0.5 ms before each execute_reply, for clients that act on
    # the reply before the cell's output arrives; inside gVisor that sleep costs
    # a few ms per cell. The host ends a cell on the reply *and* the idle status,
    # which follows every output on IOPub, so it needs no sleep.
    _execute_sleep = Float(0.0).tag(config=True)
    completion_deadline = Float(5.0, help="Seconds a Tab completion may hold the shell (and the cells sent after "
                                "it) before it is stopped and answered without jedi, or empty").tag(config=True)
    implementation = "cellgate"
    implementation_version = "0.1.0"
    banner = "cellgate: an IPython kernel in a gVisor sandbox; tools calls are gated and recorded"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]  # no debugger yet (lazy_debugger)
        self._debugger_installed = lazy_debugger.installed()
        self._stopped_events: asyncio.Future[None] | None = None
        self.gate_client = runtime.GateClient(reply_wait=_env_float(wire.ENV_REPLY_WAIT, 3600.0))
        runtime.install(self.gate_client)
        self.files = files.FileService()  # the host's uploads and downloads (``files``)
        self.tunnel = tunnel.Tunnel()  # the sandbox's HTTP(S) clients' one way out: to the host gate (``tunnel``)
        self.hibernation: hibernate.Hibernation | None = None  # a pause the host asked for (``hibernate``)
        self.idle_trim = heap.IdleTrim()  # the heap a cell freed, given back once the kernel is idle
        self._preload_tools()
        if self.shell is not None:
            pip_magic.register(self.shell)  # %pip install: through the gate, not the network
            network_hint.register(self.shell)  # a failed connection says the sandbox has no network
        self.restricted = self._restricted_runner()
        threads_inherit_the_cell()
        limit = os.environ.get(wire.ENV_OUTPUT_LIMIT, "")
        self.output_cap = OutputCap(int(limit)) if limit.isdigit() else None
        log_path = os.environ.get(wire.ENV_OUTPUT_LOG)
        self.output_log = outlog.OutputLog(log_path) if log_path else None
        if self.session is not None:
            outlog.number_iopub(self.session, (self.iopub_socket, getattr(self, "iopub_thread", None)))
        for stream in (sys.stdout, sys.stderr):
            if hasattr(stream, "parent_header"):  # ipykernel's OutStream, not a terminal
                skip_empty_flushes(stream)
                if self.output_log is not None:  # under the cap: what the cap drops is not logged either
                    self.output_log.wrap(stream)
                if self.output_cap is not None:
                    self.output_cap.wrap(stream)

    @property
    @override
    def kernel_info(self) -> dict[str, Any]:
        """ipykernel's, offering the debugger whenever debugpy is installed (it is loaded when first asked)."""
        info: dict[str, Any] = super().kernel_info
        if self._debugger_installed and "debugger" not in info["supported_features"]:
            info["supported_features"].append("debugger")
        return info

    @override
    async def do_debug_request(self, msg: Any) -> Any:
        if getattr(self, "debugger", None) is None and self._debugger_installed:
            self._start_debugger()
        return await super().do_debug_request(msg)  # type: ignore[no-untyped-call]

    def _start_debugger(self) -> None:
        """Make ipykernel's debugger as its kernel would have at start (on the control thread, as requests are)."""
        module = lazy_debugger.load()
        if module is None:
            self._debugger_installed = False
            return
        self.debugger = module.Debugger(self.log, self.debugpy_stream, self._publish_debug_event,
                                        self.debug_shell_socket, self.session, self._kernel_modules,
                                        self.debug_just_my_code, self.filter_internal_frames)
        polling = IPythonKernel.poll_stopped_queue(self)  # type: ignore[no-untyped-call]
        self._stopped_events = asyncio.ensure_future(polling)

    @override
    async def poll_stopped_queue(self) -> None:
        """ipykernel's start runs this; without a debugger yet there is nothing to poll (``_start_debugger``
        polls once it made one)."""
        if getattr(self, "debugger", None) is not None:
            await super().poll_stopped_queue()  # type: ignore[no-untyped-call]

    def _restricted_runner(self) -> Any:
        setting = os.environ.get(wire.ENV_RESTRICTED)
        if setting is None:
            return None
        from .restricted import RestrictedRunner

        preload = {"tools": self.shell.user_ns["tools"]} if self.shell and "tools" in self.shell.user_ns else {}
        return RestrictedRunner(frozenset(json.loads(setting)), preload)

    @override
    async def do_execute(self, code: str, silent: bool, store_history: bool = True,
                         user_expressions: Any = None, allow_stdin: bool = False, *, cell_meta: Any = None,
                         cell_id: Any = None) -> dict[str, Any]:
        if self.output_cap is not None:
            self.output_cap.new_cell()
        self.tunnel.wait_ready()
        self.idle_trim.cell_started()
        try:
            return await self._execute(code, silent, store_history, user_expressions, allow_stdin,
                                       cell_meta=cell_meta, cell_id=cell_id)
        finally:
            self.idle_trim.cell_ended()

    async def _execute(self, code: str, silent: bool, store_history: bool, user_expressions: Any,
                       allow_stdin: bool, *, cell_meta: Any, cell_id: Any) -> dict[str, Any]:
        if self.restricted is None:
            reply: dict[str, Any] = await super().do_execute(  # type: ignore[no-untyped-call]
                code, silent, store_history, user_expressions, allow_stdin, cell_meta=cell_meta, cell_id=cell_id)
            return reply
        assert self.shell is not None
        count = self.shell.execution_count
        if store_history:
            self.shell.execution_count += 1
        try:
            self.restricted.run(code)
        except BaseException as exc:  # noqa: BLE001 - the cell's error, reported like IPython reports one
            error = {"ename": type(exc).__name__, "evalue": str(exc), "traceback": _cell_traceback(exc)}
            self.send_response(self.iopub_socket, "error", error)  # type: ignore[no-untyped-call]
            return {"status": "error", "execution_count": count, **error}
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return {"status": "ok", "execution_count": count, "user_expressions": {}, "payload": []}

    @override
    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        """IPython's completion (jedi first), stopped at ``completion_deadline``; then IPython's own matchers alone
        under the same deadline, then no matches: the cells behind it wait a bounded time."""
        assert self.shell is not None
        completer = self.shell.Completer
        use_jedi = completer.use_jedi
        try:
            for jedi in dict.fromkeys((use_jedi, False)):
                completer.use_jedi = jedi
                try:
                    with deadline(self.completion_deadline) as limit:
                        reply: dict[str, Any] = super().do_complete(code, cursor_pos)  # type: ignore[no-untyped-call]
                except DeadlineExpired:
                    pass
                if not limit.expired:
                    return reply
                self.log.warning("completion (jedi: %s) stopped after %.1f s", jedi, self.completion_deadline)
        finally:
            completer.use_jedi = use_jedi
        position = len(code) if cursor_pos is None else cursor_pos
        return {"matches": [], "cursor_start": position, "cursor_end": position, "metadata": {}, "status": "ok"}

    def _preload_tools(self) -> None:
        if self.shell is None:
            return
        try:
            tools = importlib.import_module("tools")
        except ImportError:
            return  # a session without tools
        self.shell.user_ns["tools"] = tools
        # Keep `tools` out of %who and `del`-by-reset surprises like other preloads.
        self.shell.user_ns_hidden["tools"] = tools
        functions = ptc.namespace(tools)  # [tools] call_style = "ptc": each tool also a top-level async function
        self.shell.user_ns.update(functions)
        self.shell.user_ns_hidden.update(functions)

    @override
    async def process_control(self, msg: Any) -> None:
        """Gate replies skip ipykernel's control round; everything else takes it.

        ipykernel answers each control message with a busy/idle pair on IOPub
        and two cross-thread flushes of stdout/stderr. A gate reply is not a
        frontend's request, and inside gVisor that round cost more than the
        call itself; the reply is still deserialised with its signature
        checked, and handled on this (control) thread as before.
        """
        if self.session is None:
            return
        try:
            _, parts = self.session.feed_identities(msg, copy=False)  # a view: ``msg`` stays whole
        except ValueError:
            parts = []  # no delimiter: ipykernel's own handling reports it
        if _msg_type(parts) == "comm_msg":
            try:
                reply = self.session.deserialize(parts, content=True, copy=False)
            except Exception:
                self.log.error("Invalid Control Message", exc_info=True)  # noqa: G201
                return
            self._gate_reply(reply)
            return
        await super().process_control(msg)  # type: ignore[no-untyped-call]

    def _after_resume(self) -> None:
        """The host serving this kernel now learns its comms anew (from their comm_open)."""
        self.gate_client.forget_comm()
        self.files.forget_comm()
        self.tunnel.forget_comm()

    def _gate_reply(self, msg: dict[str, Any]) -> None:
        content = msg.get("content") or {}
        if content.get("comm_id") == self.gate_client.comm_id:
            self.gate_client.resolve(content.get("data"), list(msg.get("buffers") or []))
        elif content.get("comm_id") == wire.NET_COMM:
            self.tunnel.handle(content.get("data"), list(msg.get("buffers") or []))
        elif content.get("comm_id") == wire.FILES_COMM:
            self.files.handle(content.get("data"), list(msg.get("buffers") or []))
        elif content.get("comm_id") == wire.PAUSE_COMM and self.parent is not None:
            if self.hibernation is None:
                self.hibernation = hibernate.Hibernation(self.parent, self.output_log, self._after_resume)
            self.hibernation.request()


class CellgateKernelApp(IPKernelApp):
    """ipykernel's app, which never rewrites the connection file the host wrote.

    With CurveZMQ keys, ipykernel 7.4 finds its file unequal to what it would write (the keys as bytes beside
    the file's strings) and rewrites it, which fails where it is mounted read-only (a Kubernetes Secret).
    """

    @override
    def write_connection_file(self, **kwargs: Any) -> None:
        if os.path.exists(self.abs_connection_file):
            return
        super().write_connection_file(**kwargs)


def _msg_type(parts: list[Any]) -> str | None:
    """The msg_type of a message (signature, header, ...), read from its header alone: nothing checked yet."""
    try:
        header = json.loads(bytes(parts[1]))
    except (ValueError, IndexError, TypeError):
        return None
    return header.get("msg_type") if isinstance(header, dict) else None


def _cell_traceback(exc: BaseException) -> list[str]:
    """The traceback lines of the cell's own frames (and the tools it called), not the runner's."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith("restricted.py")
              and "/kernel/kernel.py" not in f.filename]
    lines = traceback.format_list(frames) if frames else []
    return ["Traceback (most recent call last):\n" + "".join(lines)] + traceback.format_exception_only(exc)
