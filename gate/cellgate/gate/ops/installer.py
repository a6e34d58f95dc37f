"""Installing gVisor's runsc through apt, from the machine's own Debian mirror.

Debian bookworm's runsc offers only the ptrace platform on these VMs; Debian
trixie's build is a static binary that runs on bookworm with the faster
systrap platform. We fetch it with ``apt-get download`` through a private
sources list derived from the system's own apt configuration (no host name is
written into the project), and install just the binary at ``PREFERRED_RUNSC``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.local.runsc import PREFERRED_RUNSC, probe

DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
NEWER_SUITE = "trixie"


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None


def _deb822(text: str) -> list[AptSource]:
    sources = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or "uris" not in fields:
            continue
        for uri in fields["uris"].split():
            sources.append(AptSource(uri, tuple(fields.get("suites", "").split()),
                                     tuple(fields.get("components", "").split()), fields.get("signed-by")))
    return sources


def _one_line(text: str) -> list[AptSource]:
    sources = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"^deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)$", line)
        if not match:
            continue
        options = match.group(1) or ""
        signed = re.search(r"signed-by=(\S+?)\]?(\s|$)", options)
        sources.append(AptSource(match.group(2), (match.group(3),), tuple(match.group(4).split()),
                                 signed.group(1).rstrip("]") if signed else None))
    return sources


def system_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    files = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*"))]
    sources = []
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        sources += _deb822(text) if path.suffix == ".sources" else _one_line(text) if path.suffix in (".list", "") else []
    return sources


def debian_mirror(etc_apt: Path = Path("/etc/apt")) -> AptSource:
    """The system's main Debian archive entry (a release suite with `main`)."""
    for source in system_sources(etc_apt):
        releases = [s for s in source.suites if re.fullmatch(r"[a-z]+", s)]
        if releases and "main" in source.components and "security" not in source.uri:
            return source
    raise SandboxUnavailable(
        "no Debian archive with a release suite and the main component was found in /etc/apt; "
        "install runsc by hand and set [sandbox] runsc in cellgate.toml"
    )


def _run(argv: list[str], cwd: str | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SandboxUnavailable(f"`{' '.join(argv)}` failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done.stdout


def install_debian_runsc() -> None:
    """apt-get install runsc (bookworm's build: ptrace only here, the fallback)."""
    if shutil.which("runsc"):
        return
    _run(["apt-get", "update", "-q"])
    _run(["apt-get", "install", "-y", "-q", "runsc"])


def install_newer_runsc(dest: str = PREFERRED_RUNSC, suite: str = NEWER_SUITE) -> str:
    """Fetch the newer runsc build through apt and install its binary at ``dest``."""
    mirror = debian_mirror()
    keyring = mirror.signed_by if mirror.signed_by and os.path.isfile(mirror.signed_by) else DEFAULT_KEYRING
    with tempfile.TemporaryDirectory(prefix="cellgate-apt-") as work:
        os.chmod(work, 0o755)
        lists, cache = Path(work, "lists"), Path(work, "cache")
        (lists / "partial").mkdir(parents=True)
        (cache / "archives" / "partial").mkdir(parents=True)
        Path(work, "sources.list").write_text(f"deb [signed-by={keyring}] {mirror.uri} {suite} main\n")
        options = [
            "-o", f"Dir::Etc::SourceList={work}/sources.list",
            "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::State::Lists={lists}",
            "-o", f"Dir::Cache={cache}",
            "-o", "APT::Sandbox::User=root",
        ]
        _run(["apt-get", "-q", *options, "update"])
        _run(["apt-get", "-q", *options, "download", "runsc"], cwd=work)
        debs = sorted(Path(work).glob("runsc_*.deb"))
        if not debs:
            raise SandboxUnavailable(f"apt-get download runsc from the {suite} suite produced no package")
        extracted = Path(work, "x")
        _run(["dpkg-deb", "-x", str(debs[-1]), str(extracted)])
        binary = next((p for p in (extracted / "usr/bin/runsc", extracted / "usr/sbin/runsc") if p.is_file()), None)
        if binary is None:
            raise SandboxUnavailable(f"the {suite} runsc package holds no runsc binary")
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        staged = Path(dest + ".new")
        shutil.copyfile(binary, staged)
        staged.chmod(0o755)
        os.replace(staged, dest)
    probe.cache_clear()
    found = probe(dest)
    return f"{dest} ({found.version}, platforms: {', '.join(found.platforms)})"
