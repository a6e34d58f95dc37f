"""The sandbox holds nothing of the host: no network, files, environment or root."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from conftest import token


@pytest.fixture(scope="module")
def canaries(tmp_path_factory: pytest.TempPathFactory):
    """Host secrets and files the sandbox must never see, set before it starts: a canary in the
    host process's home and working folders (both made for the test) and an API key in its environment."""
    tok = token()
    home, cwd = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("cwd")
    for folder in (home, cwd):
        (folder / f"cellgate-canary-{tok}").write_text(f"canary {tok}\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        patch.chdir(cwd)
        patch.setenv("ANTHROPIC_API_KEY", f"sk-ant-canary-{tok}")
        assert Path.home() == home
        yield tok


@pytest.fixture(scope="module")
def isolated(canaries: str, session_factory):
    return session_factory()


def run_json(box, code: str):
    result = box.execute(code + "\nimport json as _j\nprint(_j.dumps(out))")
    assert result.ok, result.text
    return json.loads(result.stdout.strip().splitlines()[-1])


def host_addresses() -> list[str]:
    """IPv4 addresses of this host a sandbox with a network could reach: loopback, and the one routes leave by."""
    addresses = ["127.0.0.1"]
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("198.51.100.1", 9))  # UDP: sends nothing, only picks the source address of the route
        addresses.append(probe.getsockname()[0])
    except OSError:
        pass  # no route off this host: loopback is the one address there is
    finally:
        probe.close()
    return sorted(set(addresses))


def reach_from_here(address: str, port: int) -> str | int:
    try:
        socket.create_connection((address, port), timeout=3).close()
        return "CONNECTED"
    except OSError as e:
        return e.errno or 0


PROBE = '''
import socket
def reach(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect(addr); return "CONNECTED"
    except OSError as e:
        return e.errno
    finally:
        s.close()
'''


def test_no_network(isolated) -> None:
    # Controls: a listener of the host's that the host itself reaches on each of its addresses (so a refused
    # connection from the sandbox is the sandbox's doing), and one inside the sandbox that the probe does reach.
    listener = socket.create_server(("0.0.0.0", 0))
    port = listener.getsockname()[1]
    addresses = host_addresses()
    try:
        assert {a: reach_from_here(a, port) for a in addresses} == dict.fromkeys(addresses, "CONNECTED")
        out = run_json(isolated, PROBE + f'''
out = {{}}
for name, fam, addr in [("v4", socket.AF_INET, ("1.1.1.1", 443)), ("v6", socket.AF_INET6, ("2606:4700:4700::1111", 443))]:
    out[name] = reach(fam, addr)
out["host"] = {{a: reach(socket.AF_INET, (a, {port})) for a in {addresses!r}}}
own = socket.create_server(("127.0.0.1", 0))
out["own"] = reach(socket.AF_INET, own.getsockname())
try:
    socket.getaddrinfo("example.com", 443); out["dns"] = "RESOLVED"
except OSError as e:
    out["dns"] = str(e)
out["links"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])
''')
    finally:
        listener.close()
    assert out["own"] == "CONNECTED"  # the probe sees a connection when there is one
    assert out["v4"] != "CONNECTED" and out["v6"] != "CONNECTED"
    assert "CONNECTED" not in out["host"].values(), out["host"]
    assert out["dns"] != "RESOLVED"
    assert out["links"] == ["lo"]


def test_host_files_absent(isolated, canaries: str) -> None:
    # The control: a file with the canary's name that the sandbox does hold (its own /tmp) must be found, and the walk
    # must have gone through the tree, so a walk that silently failed (its errors are ignored) cannot pass.
    out = run_json(isolated, f'''
import os
open("/tmp/cellgate-control-{canaries}", "w").close()
out = {{"found": [], "folders": 0, "errors": []}}
for root, dirs, files in os.walk("/", onerror=lambda e: out["errors"].append(e.filename)):
    if root.startswith(("/proc", "/sys", "/dev")):
        dirs[:] = []
        continue
    out["folders"] += 1
    out["found"] += [os.path.join(root, f) for f in files if "{canaries}" in f]
''')
    assert out["found"] == [f"/tmp/cellgate-control-{canaries}"], out["found"]
    assert "/" not in out["errors"] and out["folders"] > 100, (out["folders"], out["errors"][:20])


def test_host_environment_absent(isolated, canaries: str) -> None:
    out = run_json(isolated, '''
import os
out = {"env": dict(os.environ), "init": open("/proc/1/environ", "rb").read().decode(errors="replace")}
''')
    assert "ANTHROPIC_API_KEY" not in out["env"]
    assert canaries not in json.dumps(out)


def test_runs_as_non_root_without_capabilities(isolated) -> None:
    out = run_json(isolated, '''
import ctypes, os
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
PR_GET_NO_NEW_PRIVS = 39
nnp = ctypes.CDLL(None, use_errno=True).prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
out = {"uid": os.getuid(), "euid": os.geteuid(), "cap": status["CapEff"].strip(), "nnp": nnp}
''')
    assert out["uid"] != 0 and out["euid"] != 0
    assert int(out["cap"], 16) == 0
    assert out["nnp"] == 1


def test_writes_outside_tmpfs_and_workspace_fail_read_only(isolated) -> None:
    out = run_json(isolated, '''
import errno, os
out = {}
for path in ["/cellgate-x", "/etc/cellgate-x", "/opt/cellgate/tools/x", "/run/cellgate/conn/x", "/usr/cellgate-x"]:
    try:
        open(path, "w").close(); out[path] = "WRITTEN"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
for path in ["/tmp/ok", "/workspace/ok"]:
    open(path, "w").write("fine"); out[path] = open(path).read()
out["read-only"] = {path: bool(os.statvfs(path).f_flag & os.ST_RDONLY) for path in ["/", "/usr", "/tmp", "/workspace"]}
out["left"] = [path for path in ["/cellgate-x", "/usr/cellgate-x"] if os.path.lexists(path)]
''')
    for path in ["/etc/cellgate-x", "/opt/cellgate/tools/x", "/run/cellgate/conn/x"]:
        assert out[path] == "EROFS", (path, out[path])
    # The image's own folders (its root among them) belong to root: gVisor checks permission first, so the
    # write is refused EACCES; an EACCES alone would pass on a writable root too, so the mount must say read-only
    # (as root could otherwise write there) and nothing may be left.
    assert out["/cellgate-x"] in ("EROFS", "EACCES")
    assert out["/usr/cellgate-x"] in ("EROFS", "EACCES")
    assert out["read-only"] == {"/": True, "/usr": True, "/tmp": False, "/workspace": False}, out["read-only"]
    assert out["left"] == []
    assert out["/tmp/ok"] == out["/workspace/ok"] == "fine"


def test_it_is_gvisor(isolated) -> None:
    result = isolated.execute("import subprocess; print(subprocess.run(['dmesg'], capture_output=True, text=True).stdout)")
    assert "Starting gVisor" in result.stdout
    info = isolated.session.sandbox_info
    assert info["runtime"] == "gvisor" and info["runsc_version"] and info["platform"] in ("systrap", "ptrace")


def test_state_persists_across_cells(isolated) -> None:
    assert isolated.execute("counter = 41").ok
    assert isolated.execute("counter += 1\nprint(counter)").stdout == "42\n"
