"""The kernel's environment: one neutral function every backend's kernel gets its environment from.

An allowlist, never the host's: the interpreter's paths, where the ``tools``
package, the connection file and the sockets are inside the sandbox, and the
limits the kernel applies itself (``cellgate.kernel.wire``'s names). The local
backend writes it into the OCI spec (``local.oci``); the kubernetes backend
into the pod's container (``host_files=False``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final, Protocol

from cellgate.gate.sandbox.limits import SandboxLimits
from cellgate.kernel import wire


class SandboxRequest(Protocol):
    """What is read here of ``sandbox.backend.SandboxRequest`` (a Protocol: this module imports no pydantic, and
    the seam imports this module)."""

    @property
    def limits(self) -> SandboxLimits: ...
    @property
    def reply_wait(self) -> float: ...
    @property
    def restricted(self) -> tuple[str, ...] | None: ...


CHANNELS: Final = ("shell", "iopub", "stdin", "control", "hb")  # the Jupyter channels a kernel serves

# Paths inside the sandbox, whatever runs it (a pod mounts the same).
IPC_DIR: Final = "/run/cellgate/ipc"
CONNECTION_FILE: Final = "/run/cellgate/conn/kernel.json"
TOOLS_DIR: Final = "/opt/cellgate/tools"
PACKAGES_DIR: Final = "/opt/cellgate/packages"  # the session's package layer (``%pip install``), read-only
WORKSPACE: Final = "/workspace"
SNAPSHOT_READY: Final = "snapshot-ready"
OUTPUT_LOG: Final = "output.log"  # in the socket folder: the kernel's stream output, read by the host if it dies
HEAP_MMAP_THRESHOLD: Final = 256 << 20  # bytes: larger blocks are mapped on their own (glibc's default: 128 KiB)
HEAP_TRIM_THRESHOLD: Final = 1 << 30  # free bytes atop the heap before glibc trims it itself (the kernel trims idle)
HEAP_TOP_PAD: Final = 64 << 20  # bytes a heap grows by beyond what it needs (glibc's default: 128 KiB)


# The sandbox's one way out (``cellgate.kernel.tunnel``): every client's proxy and trust settings point at the
# kernel's endpoint and the session's CA. NO_PROXY is empty: 127.0.0.1 in a URL is the host's, reached through the
# gate like any address (a rule must name it literally), never the sandbox's own loopback.
NETWORK_ENV: Final = {
    **{name: wire.NET_PROXY_URL for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                                             "all_proxy", "PIP_PROXY", "npm_config_proxy", "npm_config_https_proxy")},
    "NO_PROXY": "",
    "no_proxy": "",
    **{name: wire.NET_CA_FILE for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE",
                                           "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "npm_config_cafile")},
}

ENV_ALLOWLIST: Final = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONNOUSERSITE",
        "PYTHONSAFEPATH",
        "JUPYTER_RUNTIME_DIR",
        "JUPYTER_PLATFORM_DIRS",
        "IPYTHONDIR",
        "MPLCONFIGDIR",
        "MPLBACKEND",
        "XDG_CACHE_HOME",
        "FONTCONFIG_FILE",
        "TMPDIR",
        "MALLOC_ARENA_MAX",
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_TRIM_THRESHOLD_",
        "MALLOC_TOP_PAD_",
        "PYTHONMALLOC",
        *wire.KERNEL_ENV,
        *NETWORK_ENV,
    }
)


def kernel_environment(limits: SandboxLimits, reply_wait: float, restricted: tuple[str, ...] | None,
                       python_path: Sequence[str] = (), host_files: bool = True,
                       preload: Sequence[str] = (), warm_completion: bool = False) -> dict[str, str]:
    """The kernel's whole environment (an allowlist, never the host's).

    ``python_path`` holds where the ``cellgate.kernel`` package is in the sandbox, if not on the interpreter's
    own path; the ``tools`` package is expected at ``TOOLS_DIR``, the connection file at ``CONNECTION_FILE``.
    ``restricted``: restricted mode's extra allowed imports (None: restricted mode off). ``host_files=False``
    (a kernel away from this host, e.g. in a pod) leaves out what only a host-backed folder gives: the output log
    (``ENV_OUTPUT_LOG``: the gate reads it on the host) and the snapshot's ready file (``ENV_SNAPSHOT_READY``:
    runsc's checkpoints are this host's), and the generated /etc's fonts.conf (``FONTCONFIG_FILE``: an image has
    its own /etc).
    """
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": WORKSPACE,
        "LANG": "C.UTF-8",
        "PYTHONPATH": ":".join([TOOLS_DIR, *python_path]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "JUPYTER_RUNTIME_DIR": "/tmp/jupyter",
        "JUPYTER_PLATFORM_DIRS": "1",
        "IPYTHONDIR": "/tmp/ipython",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        "XDG_CACHE_HOME": "/tmp/cache",  # jedi's and parso's caches: the sandbox's tmpfs, never the workspace
        # The generated /etc's fonts.conf (local.oci.etc_files): without one every matplotlib cell printed
        # "Fontconfig error: Cannot load default config file" into the record and the model's view.
        "FONTCONFIG_FILE": "/etc/fonts.conf",
        "TMPDIR": "/tmp",
        wire.ENV_RLIMIT_AS: str(limits.address_space_bytes),
        wire.ENV_REPLY_WAIT: f"{reply_wait:g}",
        wire.ENV_OUTPUT_LIMIT: str(limits.kernel_output_bytes),
        # glibc reserves 64 MiB of address space per thread arena; under the RLIMIT_AS cap that would leave room
        # for only a few dozen threads. Two, not one: with one, ZeroMQ's I/O threads and Python's queued on one
        # lock, and under load (100 sessions on two cores) calls failed their deadlines.
        "MALLOC_ARENA_MAX": "2",
        # glibc's malloc for Python's objects too, keeping what a cell frees (a page first touched inside gVisor
        # is a costly fault; a 10 MB tool result decodes four times as fast): the kernel gives it back once idle
        # (cellgate.kernel.heap). Blocks up to 256 MiB come from the heap, not a fresh mapping each time, and a
        # heap grows 64 MiB at a time (address space only until touched): in page-sized steps, each a costly
        # call inside gVisor, a 10 MB result's first decode on the control thread's arena took 2.6 s.
        "PYTHONMALLOC": "malloc",
        "MALLOC_MMAP_THRESHOLD_": str(HEAP_MMAP_THRESHOLD),
        "MALLOC_TRIM_THRESHOLD_": str(HEAP_TRIM_THRESHOLD),
        "MALLOC_TOP_PAD_": str(HEAP_TOP_PAD),
        # Where a kernel started without a connection file says it is ready to
        # be snapshotted (cellgate.kernel.snapshot); ignored by every other start.
        wire.ENV_SNAPSHOT_READY: f"{IPC_DIR}/{SNAPSHOT_READY}",
        # Where the kernel also writes its stream output (cellgate.kernel.outlog).
        wire.ENV_OUTPUT_LOG: f"{IPC_DIR}/{OUTPUT_LOG}",
        **NETWORK_ENV,
    }
    if restricted is not None:
        env[wire.ENV_RESTRICTED] = json.dumps(sorted(restricted))
    if preload:  # the image's modules to import before its snapshot (``cellgate.kernel.snapshot``)
        env[wire.ENV_PRELOAD] = json.dumps(list(preload))
    if warm_completion:  # the image's choice: a fast first Tab completion for ~29 MB more per sandbox
        env[wire.ENV_WARM_COMPLETION] = "1"
    if not host_files:
        del env[wire.ENV_OUTPUT_LOG], env[wire.ENV_SNAPSHOT_READY], env["FONTCONFIG_FILE"]
    assert set(env) <= ENV_ALLOWLIST
    return dict(sorted(env.items()))


def request_environment(request: SandboxRequest, python_path: Sequence[str] = (),
                        host_files: bool = True) -> dict[str, str]:
    """``kernel_environment`` with a request's limits, reply wait and restricted mode."""
    return kernel_environment(request.limits, request.reply_wait, request.restricted, python_path, host_files)


__all__ = ["CHANNELS", "CONNECTION_FILE", "ENV_ALLOWLIST", "IPC_DIR", "OUTPUT_LOG", "PACKAGES_DIR", "SNAPSHOT_READY",
           "TOOLS_DIR", "WORKSPACE",
           "kernel_environment", "request_environment"]
