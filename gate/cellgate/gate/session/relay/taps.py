"""What the relay reads off the traffic it passes: cells sent, their replies, input requests, and IOPub.

- an ``execute_request`` from a frontend is recorded as a cell of its shell
  (restricted mode may refuse it, a cell that cannot be recorded is not run,
  nor one sent to a subshell the host did not see created);
- on control, subshells created and deleted (``subshells``; a create past the
  bound is answered by the host);
- the kernel's ``execute_reply`` and idle status end the running cell they name;
- an ``input_request`` reaches frontends only while the cell it names runs and allowed stdin;
- IOPub is bounded before it is parsed (``messages``); tool calls on the gate's
  comms go to ``CallRelay`` and never reach frontends; outputs are captured
  for the running cell, or kept with the ended cell whose work printed them.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from jupyter_client.session import Session

from cellgate.gate._errors import SessionError
from cellgate.gate.audit.journal import JournalError
from cellgate.gate.audit.recorder import CellRecord, output_dict
from cellgate.gate.calls import retry
from cellgate.gate.calls.protocol import ProtocolError
from cellgate.gate.session.bounds import (
    MAX_HEADER_BYTES,
    MAX_METADATA_BYTES,
    MAX_OUTPUT_VALUES,
    MAX_PARSED_CONTENT,
    json_values,
)
from cellgate.gate.session.cells import frontend_replies
from cellgate.gate.session.cells.queue import CellQueue, FrontendRequest
from cellgate.gate.session.cells.subshells import MAX_SUBSHELLS
from cellgate.gate.session.commands import PendingCommands, command_source
from cellgate.gate.session.context import SessionContext
from cellgate.gate.session.files import FileRelay
from cellgate.gate.session.kernel.watch import KernelWatch
from cellgate.gate.session.relay.call_relay import CallRelay
from cellgate.gate.session.relay.messages import COMM_TYPES, OUTPUT_TYPES, content_within, precheck, read_unparsed
from cellgate.gate.session.relay.net_link import NetLink
from cellgate.gate.telemetry import is_traceparent
from cellgate.kernel import restricted
from cellgate.kernel.wire import COMM_TARGET, FILES_TARGET, NET_TARGET

MAX_GATE_COMMS = 64


class Taps:
    def __init__(self, ctx: SessionContext, cells: CellQueue, kernel: KernelWatch, calls: CallRelay,
                 files: FileRelay, front_session: Session, restricted: bool) -> None:
        self.recorder = ctx.recorder
        self.events = ctx.events
        self.cells = cells
        self.kernel = kernel
        self.calls = calls
        self._front_session = front_session
        self.restricted = restricted
        self.output_limit = cells.output_limit
        self.gate_comms: set[str] = set()
        self.commands = PendingCommands()  # cells the session sent as commands (``Session.run_command``)
        self.files = files  # the kernel's answers to file requests (``Session.upload``, ``download``)
        self.net: NetLink | None = None  # the kernel's tunnel (``net_link``), when the session has a network gate

    # ------------------------------------------------------------ shell and stdin
    def request(self, frames: list[bytes]) -> bool:
        """Record an execute_request; False when the host answers it instead of the kernel."""
        try:
            idents, rest = self._front_session.feed_identities(frames)
            msg = self._front_session.deserialize(rest)
        except Exception as exc:
            self.events.protocol("protocol-error", channel="shell-request", error=f"{type(exc).__name__}: {exc}"[:300])
            return True
        if msg["header"].get("msg_type") != "execute_request":
            return True
        content = msg["content"]
        code = content.get("code")
        if not isinstance(code, str):
            return True
        msg_id = msg["header"]["msg_id"]
        self.cells.results.forget(msg_id, only_done=True)  # a client may reuse a msg_id after a restart
        request = FrontendRequest(header=msg["header"], idents=cast(list[bytes], list(idents)), allow_stdin=content.get("allow_stdin") is True)
        subshell_id = msg["header"].get("subshell_id")
        shell = subshell_id if self.cells.subshells.knows(subshell_id) else None
        meta = msg.get("metadata")
        asked = meta.get("cellgate") if isinstance(meta, dict) else None
        retrying = isinstance(asked, dict) and asked.get("retry") is True  # ``calls.retry``
        failed = retry.last_failed(self.recorder.cells) if retrying else None
        try:
            traceparent = meta.get("traceparent") if isinstance(meta, dict) else None  # the sender's trace, if any
            argv = self.commands.claim(msg_id, code)
            record = self.recorder.cell_sent(msg_id, code if argv is None else command_source(argv),
                                             bool(content.get("silent")), "code" if argv is None else "command",
                                             subshell=shell, argv=argv,
                                             traceparent=traceparent if is_traceparent(traceparent) else None,
                                             retry_of=retry.chain_of(failed) if failed is not None else None)
        except JournalError as exc:
            # A cell that cannot be recorded is not run: answer it here, never forward it.
            error = frontend_replies.audit_unavailable(str(exc))
            future = self.cells.results.future(msg_id)  # the caller may not be waiting yet: it finds this one
            if not future.done():
                future.set_exception(SessionError(error["evalue"]))
            self.cells.answer_soon(request, error)
            return False
        if retrying and failed is None:
            self._reject(record, request, frontend_replies.nothing_to_retry(), "retry")
            return False
        if subshell_id is not None and shell is None:
            self._reject(record, request, frontend_replies.unknown_subshell(subshell_id), "subshell")
            return False
        if self.restricted:
            problems = restricted.check(code)  # compile only: nothing of the program runs on the host
            if problems:
                self._reject(record, request, frontend_replies.restricted(problems), "restricted")
                return False
        self.cells.add(record, request, shell)
        return True

    def _reject(self, record: CellRecord, request: FrontendRequest, error: dict[str, Any], limit: str) -> None:
        """The host refused the cell (restricted mode, an unknown subshell): record it as `rejected` and answer the
        frontend; the kernel never sees it."""
        try:
            self.recorder.cell_started(record)
            self.recorder.output(record, {"output_type": "error",
                                          **{k: error[k] for k in ("ename", "evalue", "traceback")}})
            self.recorder.cell_ended(record, "rejected", [limit],
                                     {"ename": error["ename"], "evalue": error["evalue"]})
        except Exception as exc:
            self.events.failure(exc)
        self.cells.results.future(record.msg_id).set_result(record)
        self.cells.answer_soon(request, error)

    # ------------------------------------------------------------ control
    def control_request(self, frames: list[bytes]) -> list[bytes] | None:
        """A frontend's control request; the frames of the host's own reply when it refuses a subshell past the
        bound (the kernel never sees the request), else None: relay it."""
        try:
            idents, rest = self._front_session.feed_identities(frames)
            msg = self._front_session.deserialize(rest)
        except Exception:
            return None  # the relay's re-signing reports and drops it
        msg_type, msg_id = msg["header"].get("msg_type"), str(msg["header"].get("msg_id"))
        if msg_type == "create_subshell_request" and not self.cells.subshells.may_create(msg_id):
            self.events.life("subshell-refused", limit=MAX_SUBSHELLS)
            reply = self._front_session.msg("create_subshell_reply", frontend_replies.subshell_limit(MAX_SUBSHELLS),
                                            parent=msg["header"])
            return self._front_session.serialize(reply, ident=idents)
        if msg_type == "delete_subshell_request" and isinstance(msg["content"], dict):
            self.cells.subshells.deleting(msg_id, msg["content"].get("subshell_id"))
        return None

    def control_reply(self, frames: list[bytes]) -> None:
        """The kernel's answers to subshell requests: what the host counts as created, or gone."""
        try:
            _, msg = read_unparsed(self.kernel.session, frames, MAX_HEADER_BYTES, MAX_METADATA_BYTES)
        except Exception:
            return  # the relay's rebuilding of the reply reports and drops it
        msg_type = msg["header"].get("msg_type")
        if msg_type not in ("create_subshell_reply", "delete_subshell_reply"):
            return
        try:
            content = content_within(msg, MAX_HEADER_BYTES) or {}
        except ProtocolError:
            content = {}
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        if msg_type == "create_subshell_reply":
            created = self.cells.subshells.created(parent_id, content)
            if created is not None:
                self.events.life("subshell-created", subshell=created)
            return
        deleted = self.cells.subshells.deleted(parent_id, content)
        if deleted is not None:
            self.events.life("subshell-deleted", subshell=deleted)
            self.cells.subshell_deleted(deleted)

    def read(self, frames: list[bytes], channel: str) -> tuple[list[bytes], Any] | None:
        """A kernel message with its headers checked and parsed, its content left unparsed (bytes)."""
        try:
            return read_unparsed(self.kernel.session, frames, MAX_HEADER_BYTES, MAX_METADATA_BYTES)
        except Exception as exc:
            self.events.protocol("protocol-error", channel=channel, error=f"{type(exc).__name__}: {exc}"[:300])
            return None

    def stdin_allowed(self, frames: list[bytes]) -> bool:
        """Pass an input_request on only while the cell it names runs and allowed stdin (G10)."""
        parsed = self.read(frames, "stdin")
        if parsed is None:
            return False
        msg = parsed[1]
        if len(msg["content"]) > MAX_HEADER_BYTES:
            self.events.protocol("input-request-dropped", msg_type=str(msg["header"].get("msg_type"))[:80],
                                 reason=f"content of {len(msg['content'])} bytes (limit {MAX_HEADER_BYTES})")
            return False
        head = self.cells.running_cell((msg.get("parent_header") or {}).get("msg_id"))
        if head is not None and head.request.allow_stdin:
            return True
        try:
            content = content_within(msg, MAX_HEADER_BYTES)
        except ProtocolError:
            content = {}
        prompt = str((content or {}).get("prompt", ""))[:200]
        self.events.protocol("input-request-dropped", msg_type=msg["header"].get("msg_type"), prompt=prompt,
                             reason="no running cell of this session allowed stdin")
        return False

    def reply(self, frames: list[bytes]) -> None:
        """The kernel's execute_reply, for the first cell of its shell not yet answered."""
        parsed = self.read(frames, "shell-reply")
        if parsed is None:
            return
        msg = parsed[1]
        if msg["header"].get("msg_type") != "execute_reply":
            return
        head = self.cells.replying_cell((msg.get("parent_header") or {}).get("msg_id"))
        if head is None:
            return
        try:
            content = content_within(msg, MAX_PARSED_CONTENT)
        except ProtocolError as exc:
            self.events.protocol("protocol-error", channel="shell-reply", error=str(exc)[:300])
            content = {}
        if content is None:
            size = len(msg["content"])
            self.events.protocol("message-too-large", channel="shell", size=size, limit_bytes=MAX_PARSED_CONTENT)
            content = {"status": "error", "ename": "MessageTooLarge",
                       "evalue": f"the kernel's execute_reply was {size} bytes, over the {MAX_PARSED_CONTENT} "
                                 "bytes the host reads; it was not parsed"}
        count = content.get("execution_count")
        if isinstance(count, int) and not isinstance(count, bool):
            self.cells.saw_count(count)
            if count != head.record.execution_count:
                self.events.write(lambda: self.recorder.execute_input(head.record, count))
        error = None
        if content.get("status") == "error":
            error = {"ename": str(content.get("ename"))[:200], "evalue": str(content.get("evalue"))[:2000]}
        self.cells.replied(head, str(content.get("status")), error)

    # ------------------------------------------------------------- iopub
    def iopub(self, frames: list[bytes]) -> dict[str, Any] | None:
        """Handle one IOPub message; returns it if frontends should see it (rebuilt by relaywire)."""
        session = self.kernel.session
        _, feed = session.feed_identities(frames)
        rest = cast(list[bytes], feed)  # read with copy=True: bytes, never zmq.Frame
        msg_type = precheck(rest, self.events.protocol)
        if msg_type is None:
            return None
        msg = session.deserialize(rest, content=False)
        if msg["header"].get("msg_type") != msg_type:  # pragma: no cover - same bytes parsed twice
            return None
        self.kernel.seen(msg)  # numbered by the kernel: gaps are lost messages
        size = len(msg["content"])
        if msg_type in OUTPUT_TYPES and json_values(msg["content"]) > MAX_OUTPUT_VALUES:
            parsed = None  # small text, huge structure: what it would cost is counted, not paid
        else:
            parsed = content_within(msg, self.output_limit // 2 if msg_type in OUTPUT_TYPES else MAX_PARSED_CONTENT)
        if parsed is None:
            self._unread(msg, msg_type, size)
            return None
        content = msg["content"] = parsed if isinstance(parsed, dict) else {}
        if msg_type in COMM_TYPES:
            return self._comm(msg, msg_type, content, len(rest[4]))
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        head = self.cells.running_cell(parent_id)
        if head is None:
            if msg_type in OUTPUT_TYPES:
                self.cells.late.add(asyncio.get_running_loop(), str(parent_id), msg)
            return msg
        if msg_type == "status":
            if content.get("execution_state") == "idle":
                self.cells.idle(head)
        elif msg_type == "execute_input":
            head.started_in_kernel = True
            if head.interrupt_when_started:
                head.interrupt_when_started = False
                self.kernel.interrupt_soon()
            count = content.get("execution_count")
            if isinstance(count, int) and not isinstance(count, bool):
                self.cells.saw_count(count)
                self.events.write(lambda: self.recorder.execute_input(head.record, count))
        elif msg_type in ("stream", "display_data", "execute_result", "error", "clear_output"):
            self.cells.capture(head, output_dict(msg))
        return msg

    def _comm(self, msg: dict[str, Any], msg_type: str, content: dict[str, Any], size: int) -> dict[str, Any] | None:
        """The gate's own comms carry tool calls and never reach frontends; other comms pass (relaywire decides)."""
        comm_id = str(content.get("comm_id"))
        files = self.files
        if msg_type == "comm_open" and content.get("target_name") == FILES_TARGET:
            files.opened(comm_id)
            return None
        if comm_id in files.comms:
            if msg_type == "comm_msg":
                files.on_message(content.get("data"), list(msg.get("buffers") or []))
            return None
        net = self.net
        if msg_type == "comm_open" and content.get("target_name") == NET_TARGET and net is not None:
            net.opened(comm_id)
            return None
        if net is not None and comm_id in net.comms:
            if msg_type == "comm_msg":
                net.on_message(content.get("data"), list(msg.get("buffers") or []))
            return None
        if msg.get("buffers"):  # only file and network comms carry bytes (relay.messages.precheck)
            self.events.protocol("call-rejected", reason=f"comm message with {len(msg['buffers'])} buffers on a "
                                 "comm that is not the files comm (no buffers allowed)")
            return None
        if msg_type == "comm_open" and content.get("target_name") == COMM_TARGET:
            if len(self.gate_comms) >= MAX_GATE_COMMS and comm_id not in self.gate_comms:
                self.events.protocol("protocol-error", channel="iopub",
                                     error=f"more than {MAX_GATE_COMMS} gate comms opened; ignored")
            else:
                self.gate_comms.add(comm_id)
            return None
        if comm_id in self.gate_comms:
            if msg_type == "comm_msg":
                self.calls.on_request(comm_id, content.get("data"), size)
            else:
                self.gate_comms.discard(comm_id)
            return None
        return msg

    def _unread(self, msg: Any, msg_type: str, size: int) -> None:
        """A message too big to parse: an output is counted as dropped output (its size and digest are
        recorded); anything else is journalled. Never parsed, never forwarded (frontends see what is recorded)."""
        parent_id = (msg.get("parent_header") or {}).get("msg_id")
        head = self.cells.running_cell(parent_id)
        if msg_type in OUTPUT_TYPES and head is not None:
            head.output.drop_unread(msg["content"])
            self.events.protocol("output-over-limit", msg_type=msg_type, size=size, limit_bytes=self.output_limit // 2)
        elif msg_type in OUTPUT_TYPES:
            self.cells.late.unread(str(parent_id), size)
            self.events.protocol("output-over-limit", msg_type=msg_type, size=size, late=True)
        else:
            self.events.protocol("message-too-large", channel="iopub", msg_type=msg_type, size=size,
                                 limit_bytes=MAX_PARSED_CONTENT)
