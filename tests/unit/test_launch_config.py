"""Pins the exact runsc argv and OCI spec (SECURITY.md P3): any drift fails here."""

from __future__ import annotations

from cellgate.gate.sandbox.local import oci

LAYOUT = oci.Layout(bundle="/r/b", etc="/r/etc", ipc="/r/ipc", conn="/r/conn", tools="/r/tools",
                    python_dirs=("/opt/py", "/usr/lib/python3"))


def build() -> tuple[list[str], dict]:
    argv = oci.runsc_argv("/x/runsc", "/r/state", "systrap", "/r/b", "cg-1")
    env = oci.environment(["/opt/k"], oci.Limits(), 3600)
    return argv, oci.spec(LAYOUT, oci.Limits(), ["python", "-m", "cellgate.kernel"], env, sandbox_id="cg-1")


def test_runsc_argv_is_pinned() -> None:
    argv, _ = build()
    assert argv == ["/x/runsc", "--root=/r/state", "--network=none", "--host-uds=create", "--platform=systrap",
                    "run", "--bundle=/r/b", "cg-1"]
    assert not [a for a in argv for bad in oci.FORBIDDEN_FLAG_PREFIXES if a.startswith(bad)]


def test_the_forbidden_flags_are_pinned() -> None:
    """The list the launcher checks against may only grow: a flag taken out of it fails here."""
    assert set(oci.FORBIDDEN_FLAG_PREFIXES) >= {
        "--network=host", "--net-raw", "--TESTONLY", "--profile", "--iouring", "--allow-suid", "--debug",
        "--strace", "--overlay2=none", "--ignore-cgroups", "--host-uds=all", "--host-uds=open"}


def test_a_restore_from_a_snapshot_has_the_same_flags() -> None:
    argv = oci.runsc_argv("/x/runsc", "/r/state", "systrap", "/r/b", "cg-1", image="/run/cellgate/images/k")
    assert argv == ["/x/runsc", "--root=/r/state", "--network=none", "--host-uds=create", "--platform=systrap",
                    "restore", "--image-path=/run/cellgate/images/k", "--bundle=/r/b", "cg-1"]
    assert oci.checkpoint_argv("/x/runsc", "/r/state", "cg-1", "/i") == [
        "/x/runsc", "--root=/r/state", "checkpoint", "--compression=none", "--image-path=/i", "cg-1"]


def test_process_is_unprivileged_with_limits() -> None:
    _, spec = build()
    process = spec["process"]
    assert process["user"] == {"uid": 1000, "gid": 1000}
    assert process["noNewPrivileges"] is True
    assert all(caps == [] for caps in process["capabilities"].values())
    assert {r["type"] for r in process["rlimits"]} >= {"RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_CORE", "RLIMIT_FSIZE"}
    assert spec["linux"]["resources"] == {"memory": {"limit": 1 << 30}, "pids": {"limit": 256}}
    assert spec["linux"]["cgroupsPath"] == "/cellgate/cg-1"
    assert {n["type"] for n in spec["linux"]["namespaces"]} == {"pid", "network", "ipc", "uts", "mount"}


PINNED_ENV = frozenset({
    "CELLGATE_OUTPUT_LIMIT", "CELLGATE_OUTPUT_LOG", "CELLGATE_REPLY_WAIT", "CELLGATE_RESTRICTED", "CELLGATE_RLIMIT_AS",
    "CELLGATE_SNAPSHOT_READY", "CELLGATE_PRELOAD", "HOME", "IPYTHONDIR", "JUPYTER_PLATFORM_DIRS", "JUPYTER_RUNTIME_DIR", "LANG", "LC_ALL",
    "MALLOC_ARENA_MAX", "MPLBACKEND", "MPLCONFIGDIR", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE",
    "PYTHONPATH", "PYTHONSAFEPATH", "TMPDIR", "XDG_CACHE_HOME",
    "FONTCONFIG_FILE",  # the generated /etc's fonts.conf (issue 29)
    "CELLGATE_WARM_COMPLETION",  # an image whose snapshot holds jedi's parse (issue 33: memory per session)
    "PYTHONMALLOC", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",  # a heap kept while cells run (issue 33)
    # The sandbox's one way out, the kernel's tunnel to the network gate, and the session CA (issue 45).
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY", "no_proxy",
    "PIP_PROXY", "npm_config_proxy", "npm_config_https_proxy", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT",
    "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "npm_config_cafile",
})


def test_environment_is_an_allowlist_without_secrets() -> None:
    _, spec = build()
    names = {item.split("=", 1)[0] for item in spec["process"]["env"]}
    assert names <= oci.ENV_ALLOWLIST <= PINNED_ENV  # widening the allowlist must be a reviewed change here
    assert not any(word in name for name in names for word in ("KEY", "TOKEN", "SECRET", "PASSWORD"))


def test_mounts_are_read_only_except_tmpfs_and_the_socket_folder() -> None:
    _, spec = build()
    assert spec["root"] == {"path": "rootfs", "readonly": True}
    writable = {m["destination"] for m in spec["mounts"]
                if m["type"] == "bind" and "rw" in m.get("options", [])}
    assert writable == {oci.IPC_DIR}
    binds = {m["destination"]: m["source"] for m in spec["mounts"] if m["type"] == "bind"}
    assert binds["/etc"] == "/r/etc" and binds[oci.TOOLS_DIR] == "/r/tools"
    assert "/usr/lib/python3" not in binds  # already under /usr
    assert {m["destination"] for m in spec["mounts"] if m["type"] == "tmpfs"} >= {"/tmp", oci.WORKSPACE}
    assert not any(m["source"] in ("/", "/root", "/home", "/var/run/docker.sock") for m in spec["mounts"])


def test_generated_etc_is_not_the_hosts() -> None:
    files = oci.etc_files()
    assert set(files) == {"passwd", "group", "hosts", "nsswitch.conf", "fonts.conf"}
    assert "sandbox:x:1000:1000" in files["passwd"]
