"""The tool-call protocol between the sandboxed kernel and the host gate.

Names and shapes only; both sides import this module, so it holds nothing
secret and does no I/O. It also names the kernel's environment (``ENV_*``),
which the host sets (``cellgate.gate.sandbox.environment``) and the kernel reads.

Kernel -> host, a ``comm_msg`` on IOPub on a comm with target ``COMM_TARGET``::

    {"op": "call", "id": "<uuid4 hex>", "tool": "<name>", "args": {...},
     "cell": "<msg_id of the running cell>", "line": <int>, "thread": "<name>"}
    {"op": "batch", "calls": [<call>, <call>, ...]}   # async calls made in one event-loop turn

``cell`` is required (the host refuses a call without it, and one naming any
cell but the one it knows is running); ``line`` and ``thread`` are optional.
The host records ``line``, the source line it points at and ``thread`` as the
kernel's claims, never as facts.

Host -> kernel, a ``comm_msg`` on the *control* channel (the shell channel is
blocked while a cell runs)::

    {"id": "...", "ok": true, "result": <json>}
    {"id": "...", "ok": false, "error": {"kind": <ErrorKind>, "message": "..."}}
    {"batch": [<reply>, <reply>, ...]}    # replies that were ready at the same moment
"""

from __future__ import annotations

from typing import Final, Literal, get_args

COMM_TARGET: Final = "cellgate.gate"
OP_CALL: Final = "call"
OP_BATCH: Final = "batch"

ErrorKind = Literal[
    "not_found",  # no such tool in this session
    "invalid",  # arguments failed the tool's JSON Schema, or a malformed request
    "denied",  # the policy refused the call
    "budget",  # a call budget is exhausted
    "rate_limited",  # a rate limit refused the call
    "failed",  # the tool ran and raised
    "timeout",  # the tool did not answer within its deadline
    "busy",  # no slot of the tool freed within the gate's queue bound: the call was not run (backpressure)
    "no_cell",  # no cell of this session is running: tool authority is scoped to a cell
    "unavailable",  # the gate cannot serve calls (e.g. its journal cannot be written)
    "divergence",  # replay: the program made a call the recording does not have
    "outcome_unknown",  # retry: this write ran before and its outcome is unknown; it was not run again
]
ERROR_KINDS: Final[frozenset[str]] = frozenset(get_args(ErrorKind))

# Files moved in and out of the sandbox (``cellgate.kernel.files``): the host sends its requests on the control
# channel as comm_msg with this comm id; the kernel answers on a comm it opens with FILES_TARGET. File bytes travel
# as binary buffers of at most FILE_CHUNK_BYTES each, never in JSON (see ``cellgate.gate.session.files``).
FILES_TARGET: Final = "cellgate.files"
FILES_COMM: Final = "cellgate-files"
# A call's result of at least this many bytes of JSON leaves the gate as a binary frame of the reply message
# (the reply then names it: "result_frame": its index), encoded once on the host and decoded once here.
RESULT_FRAME_BYTES: Final = 1 << 16
FILE_CHUNK_BYTES: Final = 4 << 20

# The network (``cellgate.kernel.tunnel``, ``cellgate.gate.network``): the sandbox's HTTP clients reach a proxy
# endpoint on the sandbox's own loopback; the kernel carries each connection's bytes to the host on a comm it opens
# with NET_TARGET, and the host answers on the control channel with comm id NET_COMM. The host is the proxy.
NET_TARGET: Final = "cellgate.net"
NET_COMM: Final = "cellgate-net"
NET_PROXY_PORT: Final = 3128
NET_PROXY_URL: Final = f"http://127.0.0.1:{NET_PROXY_PORT}"
NET_CA_FILE: Final = "/tmp/cellgate-net/ca.pem"  # the session's CA certificate (public), written by the kernel
NET_CHUNK_BYTES: Final = 256 << 10  # bytes in one data message, either way
NET_WINDOW_BYTES: Final = 8 << 20  # bytes the host sends a connection before the kernel says they were handed on

# Pausing a live kernel (``cellgate.kernel.hibernate``): the host asks on the control channel with a comm_msg of this
# comm id; the kernel says it let go of every socket with the first file in its socket folder, and goes on when the
# host puts the second there (in the sandbox restored from the checkpoint, or the same one after a fork's).
PAUSE_COMM: Final = "cellgate-pause"
PAUSED_MARKER: Final = "paused"
RESUME_MARKER: Final = "resume"
RESUMED_MARKER: Final = "resumed"  # the kernel resumed in place has bound every socket again: the host reconnects
RESUME_IN_PLACE: Final = "in-place"  # the resume file's text when the same sandbox goes on (its host still connected)

# Generous upper bound on one request, checked by the host before parsing it.
MAX_REQUEST_BYTES: Final = 1 << 20
# Calls in one batch request; the whole batch also stays under MAX_REQUEST_BYTES.
MAX_BATCH_CALLS: Final = 64

# The kernel's output log (stream output written before IOPub, read by the host after a kernel death):
# its size before it starts over, and the metadata key numbering IOPub messages.
OUTPUT_LOG_BYTES: Final = 1 << 20
SEQ_KEY: Final = "cellgate_seq"

# The kernel's environment: set by the host (``cellgate.gate.sandbox.environment``), read by the kernel. Names only.
ENV_RLIMIT_AS: Final = "CELLGATE_RLIMIT_AS"  # address-space cap in bytes (kernel.apply_memory_limit)
ENV_REPLY_WAIT: Final = "CELLGATE_REPLY_WAIT"  # seconds a tool call waits for the gate's reply
ENV_OUTPUT_LIMIT: Final = "CELLGATE_OUTPUT_LIMIT"  # bytes one cell may print before the kernel drops the rest
ENV_OUTPUT_LOG: Final = "CELLGATE_OUTPUT_LOG"  # the output log's path (outlog)
ENV_RESTRICTED: Final = "CELLGATE_RESTRICTED"  # restricted mode's extra allowed imports, a JSON list
ENV_SNAPSHOT_READY: Final = "CELLGATE_SNAPSHOT_READY"  # where a kernel built for a snapshot says it is ready
ENV_PRELOAD: Final = "CELLGATE_PRELOAD"  # modules the image imports before its snapshot (a JSON list)
ENV_WARM_COMPLETION: Final = "CELLGATE_WARM_COMPLETION"  # "1": the snapshot holds jedi's parse (snapshot.preload)
KERNEL_ENV: Final = frozenset({ENV_RLIMIT_AS, ENV_REPLY_WAIT, ENV_OUTPUT_LIMIT, ENV_OUTPUT_LOG, ENV_RESTRICTED,
                               ENV_SNAPSHOT_READY, ENV_PRELOAD, ENV_WARM_COMPLETION})
