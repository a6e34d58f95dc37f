"""``cellgate doctor``: checks gVisor, its platform and a real sandboxed kernel."""

from __future__ import annotations

import asyncio
import os
import platform
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from cellgate.gate._errors import CellgateError, SandboxUnavailable
from cellgate.gate._versions import versions
from cellgate.gate.sandbox.backends import DEFAULT_BACKEND, load_backend
from cellgate.gate.sandbox.local import cgroups, enforcement, oci, userns
from cellgate.gate.sandbox.local.container import reap_leftovers
from cellgate.gate.sandbox.local.runsc import FIX_HINT, PREFERRED_RUNSC, find
from cellgate.gate.sandbox.local.snapshot import prune
from cellgate.gate.sandbox.runtime_dir import run_root

console = Console(highlight=False)

PROBE_TOOL = '''
def echo(text: str) -> str:
    """Return text unchanged."""
    return text
'''


def _ok(what: str, detail: str) -> None:
    console.print(f"[green]ok[/]    {what}: {detail}")


def _fail(what: str, detail: str, fix: str) -> None:
    console.print(f"[red]FAIL[/]  {what}: {detail}\n      fix: {fix}")


async def _probe_kernel() -> str:
    from cellgate.gate.session.session import Session

    with tempfile.TemporaryDirectory(prefix="cellgate-doctor-") as folder:
        tool = Path(folder, "probe_tools.py")
        tool.write_text(PROBE_TOOL)
        async with Session(tools=[tool], notebook=Path(folder, "doctor.ipynb"), isolation="gvisor",
                           cwd=folder) as session:
            result = await session.execute("import os\nprint(tools.echo('gate-ok'), os.getuid(), 6 * 7)")
            if result.status != "ok" or "gate-ok" not in result.stdout:
                raise CellgateError(f"the probe cell ended {result.status}: {result.text.strip()[:300]}")
            return f"a cell ran in gVisor and called a gated tool ({result.stdout.strip()})"


def _rootless_checks() -> int:
    """Without root: what gVisor --rootless needs here, and what it does not give. Returns the failures."""
    _ok("mode", f"not root (uid {os.geteuid()}): runsc --rootless --network=none in a user namespace; "
        f"run folders in {run_root()}")
    problem = userns.probe()
    if problem is not None:
        _fail("user namespaces", problem, userns.FIX)
        return 1
    _ok("user namespaces", "this user can make a user and mount namespace (the socket folder's tmpfs lives there)")
    if not os.access(oci.UNSHARE, os.X_OK):
        _fail("unshare", f"{oci.UNSHARE} is missing (the kernel takes its sandbox uid through it)",
              "install util-linux, or run cellgate as root")
        return 1
    console.print(f"[yellow]note[/]  snapshot: {enforcement.NO_RESTORE_ROOTLESS}")
    version = enforcement.cgroup_version()
    try:
        delegation = cgroups.find()
    except SandboxUnavailable as exc:
        _fail("cgroups", escape(str(exc).removesuffix("; " + cgroups.FIX)), escape(cgroups.FIX))
        return 1
    if delegation is not None:
        _ok("cgroups", f"{delegation.describe()}: each sandbox gets a child there with its memory and pids limits")
    else:
        console.print(f"[yellow]note[/]  cgroups: {version or 'none mounted'}; no delegated cgroup for this user "
                      f"(v1: an admin delegates one, named in {cgroups.ENV_PARENT} or \\[sandbox] cgroup_parent; "
                      "v2: systemd's user delegation), so limits bind as below")
    return 0


def _reap(backend: str) -> list[str]:
    """The leftovers of ``backend`` (the local one's without reading any configuration, as always)."""
    if backend == DEFAULT_BACKEND:
        return reap_leftovers()
    from cellgate.gate.config import find_config, load_settings

    return load_backend(backend)(load_settings(find_config())).reap()


def _image_check(fix: bool) -> int:
    """The default image is built (with ``fix``: built now); 1 if it is not."""
    from cellgate.gate.sandbox.images import build, store
    from cellgate.gate.sandbox.images.spec import PROFILES
    from cellgate.gate.sandbox.settings import SandboxSettings

    name = SandboxSettings().image
    image = store.find(name)
    if image is not None and image.manifest.get("kernel_slice_sha256") != store.kernel_digest():
        console.print(f"[yellow]note[/]  image: {escape(name)} holds another version of cellgate's kernel")
        image = None  # built for another cellgate: rebuilt by --fix, a failure otherwise
    if image is None and fix and name in PROFILES:
        try:
            image, _ = build.build(PROFILES[name], log=lambda line: console.print(f"      {escape(line)}"))
        except CellgateError as exc:
            _fail("image", escape(str(exc)), f"fix what it says, then `cellgate image build {name}`")
            return 1
    if image is None:
        _fail("image", f"the default image {name!r} is not built (a sandbox is its root filesystem)",
              f"run `cellgate image build {name}` (or `cellgate doctor --fix` as root)")
        return 1
    manifest = image.manifest
    _ok("image", escape(f"{name} sha256:{image.digest[:16]}… ({manifest['size_bytes'] >> 20} MB, "
                        f"{len(manifest['python_packages'])} Python packages) in {image.folder.parent}"))
    return 0


def doctor(fix: bool = False, clean: bool = False, backend: str = DEFAULT_BACKEND) -> int:
    failures = 0
    console.print(f"cellgate doctor — Python {platform.python_version()}, "
                  + ", ".join(f"{k} {v}" for k, v in versions().items()))
    if fix:
        from cellgate.gate.ops.installer import install_debian_runsc, install_newer_runsc

        if os.geteuid() != 0:
            _fail("fix", "installing runsc needs root", "run `sudo cellgate doctor --fix`")
            return 1
        try:
            install_debian_runsc()
            _ok("installed", install_newer_runsc())
        except SandboxUnavailable as exc:
            _fail("install runsc", str(exc), "check apt's configuration and network access to the Debian mirror")
            failures += 1
    if clean:
        try:
            reaped = _reap(backend)
        except CellgateError as exc:
            _fail("clean", escape(str(exc)), f"install and configure the {escape(backend)} backend as it says "
                  "(cellgate.toml), then run this again")
            return 1
        where = run_root() if backend == DEFAULT_BACKEND else f"the {backend} backend"
        _ok("clean", f"removed {len(reaped)} leftover sandbox(es) from {where}"
            + (f": {', '.join(reaped)}" if reaped else ""))
        images = run_root() / "images"
        if backend == DEFAULT_BACKEND:  # the local backend's own
            dropped = prune(images, 0) if images.is_dir() else 0
            _ok("clean", f"removed {dropped} snapshot image(s) from {images} (each is rebuilt when next needed)")
        from cellgate.gate.calls.approval_queue import approvals_dir, withdraw_orphans

        withdrawn = withdraw_orphans()
        _ok("clean", f"withdrew {len(withdrawn)} approval request(s) left by sessions that are gone, in "
            f"{approvals_dir()}" + (f": {', '.join(withdrawn)}" if withdrawn else ""))
    try:
        runsc = find()
    except SandboxUnavailable as exc:
        _fail("runsc", str(exc), "run `cellgate doctor --fix` as root")
        return 1
    _ok("runsc", f"{runsc.path} (version {runsc.version}; platforms {', '.join(runsc.platforms)})")
    if runsc.platform == "systrap":
        _ok("platform", "systrap")
    else:
        console.print(f"[yellow]warn[/]  platform: {runsc.platform} (slower; gVisor calls ptrace unsupported)\n"
                      f"      fix: `cellgate doctor --fix` installs the newer runsc at {PREFERRED_RUNSC}")
    if os.geteuid() != 0:
        failures += _rootless_checks()
    elif not Path("/sys/fs/cgroup").is_dir():
        _fail("cgroups", "/sys/fs/cgroup is missing: memory and pids limits cannot be enforced",
              "run on a host with cgroups mounted")
        failures += 1
    for name, how in enforcement.report(os.geteuid() != 0).items():
        line = f"{name}: {how['enforced']} ({how['by']})"
        if how["enforced"] != "whole sandbox":
            console.print(f"[yellow]note[/]  limit: {escape(line)}")  # "[sandbox] cpus" is text, not markup
        else:
            _ok("limit", escape(line))
    failures += _image_check(fix and os.geteuid() == 0)
    if failures and os.geteuid() != 0:
        console.print("[yellow]skip[/]  sandbox: not tried, it cannot start without what failed above")
        return 1
    try:
        _ok("sandbox", asyncio.run(_probe_kernel()))
    except CellgateError as exc:
        _fail("sandbox", str(exc), FIX_HINT)
        failures += 1
    console.print("[bold green]all checks passed[/]" if not failures else f"[bold red]{failures} check(s) failed[/]")
    return 1 if failures else 0
