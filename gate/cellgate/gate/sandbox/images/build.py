"""Building an image: a Debian root with ``mmdebstrap``, wheels locked by hash, the kernel slice; then stored.

1. ``mmdebstrap`` makes the essential Debian set plus the spec's packages from this machine's own Debian mirror
   (the apt sources it is configured with, never a host name of ours), as root or, without root, in a user
   namespace (``--mode=unshare``); unpacked as a tar whose every member is checked first (:func:`check_members`:
   names and link targets inside the root, nothing under a link), with setuid bits and device files dropped.
2. ``pip download`` resolves the requirements for the image's Python and platform, **wheels only** (an sdist
   would run code on the host to build), from the index this host's pip is configured for; each wheel's sha256
   makes the lock, and ``pip install --require-hashes --no-deps`` installs exactly the locked wheels.
3. cellgate's kernel slice (``cellgate.kernel``) is copied in at the host's version.

The spec, the mirror, the kernel slice and the machine's architecture make the spec key: a second build of the
same spec finds its image and does nothing.
"""

from __future__ import annotations

import glob
import os
import platform
import posixpath
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from cellgate.gate._errors import CellgateError, SandboxUnavailable
from cellgate.gate._json import canonical_json, sha256_hex, utcnow, write_atomically
from cellgate.gate.sandbox.images import store
from cellgate.gate.sandbox.images.spec import ImageSpec

FORMAT: Final = 1  # of the image layout and manifest; part of the spec key
APT_SOURCES: Final = ("/etc/apt/sources.list", "/etc/apt/sources.list.d")
SITE_PACKAGES: Final = "usr/local/lib/python{version}/dist-packages"  # on Debian's python3's own path
# Left out of the image: documentation and translations (copyright files stay).
DPKG_EXCLUDES: Final = ("path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
                        "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
                        "path-exclude=/usr/share/locale/*")
STEP_TIMEOUT: Final = 1800.0


class ImageBuildError(CellgateError, RuntimeError):
    """An image could not be built; the message says which step and what it printed."""

    code = "image-build"


def apt_sources() -> list[str]:
    """This machine's apt source files (one-line and deb822), which mmdebstrap takes as its mirror."""
    files = []
    for entry in APT_SOURCES:
        if os.path.isdir(entry):
            files += sorted(glob.glob(os.path.join(entry, "*.list")) + glob.glob(os.path.join(entry, "*.sources")))
        elif os.path.isfile(entry):
            files.append(entry)
    files = [f for f in files if any(line.strip() and not line.lstrip().startswith("#")
                                     for line in Path(f).read_text().splitlines())]
    if not files:
        raise SandboxUnavailable("this machine has no apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d): "
                                 "an image is built from the Debian mirror apt is configured with")
    return files


def debian_suite() -> str:
    """This machine's Debian release (its codename), which the image is built from."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        text = ""
    found = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", text, re.M)
    if not found:
        raise SandboxUnavailable("cannot tell this machine's Debian release (VERSION_CODENAME in /etc/os-release): "
                                 "images are built on Debian")
    return found.group(1)


def spec_key(spec: ImageSpec) -> str:
    """What decides an image's content: the spec, the mirror and release, the kernel slice, the architecture."""
    sources = {path: Path(path).read_text() for path in apt_sources()}
    return sha256_hex(canonical_json({"format": FORMAT, "spec": spec.model_dump(), "debian": spec.debian_packages(),
                                      "requirements": spec.requirements(), "suite": debian_suite(),
                                      "sources": sources, "kernel": store.kernel_digest(), "arch": platform.machine()}))


def build(spec: ImageSpec, *, log: Callable[[str], None] = lambda line: None, force: bool = False) -> tuple[store.Image, bool]:
    """Build ``spec`` into the own store, or find it built; returns the image and whether it was built now."""
    key = spec_key(spec)
    own = store.own_store()
    if not force and (ready := store.spec_key_image(own, spec.name, key)) is not None:
        return ready, False
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise SandboxUnavailable("mmdebstrap is not installed: `apt-get install mmdebstrap` (or `cellgate doctor --fix`)")
    (own / "tmp").mkdir(parents=True, exist_ok=True)
    os.chmod(own, 0o755)  # root's images are read by users' sandboxes too; a user's store is under their home
    work = own / "tmp" / f"build-{secrets.token_hex(6)}"
    work.mkdir(mode=0o700)
    started = time.monotonic()
    try:
        rootfs = work / "rootfs"
        log(f"debian: {debian_suite()} with {', '.join(spec.debian_packages())} (mmdebstrap)")
        _debootstrap(mmdebstrap, spec, work)
        python_version = _python_version(rootfs)
        site = rootfs / SITE_PACKAGES.format(version=python_version)
        log(f"python {python_version}: resolving {len(spec.requirements())} requirements, wheels only")
        locked = _lock_and_install(spec, python_version, _glibc(rootfs), work, site)
        log(f"python: {len(locked)} packages installed by hash; the kernel slice (cellgate.kernel)")
        shutil.copytree(store.kernel_slice(), site / "cellgate" / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
        _seal(rootfs)
        digest, size = store.tree_digest(rootfs)
        manifest: dict[str, Any] = {
            "format": FORMAT, "digest": digest, "spec": spec.model_dump(), "spec_key": key,
            "python_version": python_version, "python_packages": locked,
            "debian": {"suite": debian_suite(), "packages": _debian_packages(rootfs)},
            "kernel_slice_sha256": store.kernel_digest(), "arch": platform.machine(),
            "size_bytes": size, "built_at": utcnow(), "build_seconds": round(time.monotonic() - started, 1),
        }
        write_atomically(work / store.MANIFEST, canonical_json(manifest))
        os.chmod(work / store.MANIFEST, 0o444)
        final = own / f"{store.DIGEST_PREFIX}{digest}"
        os.chmod(work, 0o755)
        try:
            os.rename(work, final)
        except OSError:
            if not (final / store.MANIFEST).is_file():
                raise
            store.delete_tree(work)  # the same content, built before or by a build beside this one
        image = store.Image(final, store.read_manifest(final))
        store.point(own, spec.name, image)
        return image, True
    except BaseException:
        if work.exists():
            store.delete_tree(work)
        raise


def _run(step: str, argv: list[str], **options: Any) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_TIMEOUT, **options)
    except subprocess.TimeoutExpired:
        raise ImageBuildError(f"{step} did not finish within {STEP_TIMEOUT:g} s") from None
    if done.returncode != 0:
        said = "\n".join(line for line in (done.stderr or done.stdout).splitlines() if "is ignored:" not in line)
        raise ImageBuildError(f"{step} failed ({done.returncode}): {said.strip()[-2000:]}")


def _debootstrap(mmdebstrap: str, spec: ImageSpec, work: Path) -> None:
    tarball = work / "rootfs.tar"
    argv = [mmdebstrap, "--variant=essential", f"--mode={'root' if os.geteuid() == 0 else 'unshare'}",
            "--format=tar", "--skip=output/dev", "--quiet",
            *(f"--dpkgopt={option}" for option in DPKG_EXCLUDES),
            f"--include={','.join(spec.debian_packages())}",
            debian_suite(), str(tarball), *apt_sources()]
    _run("mmdebstrap", argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"})
    rootfs = work / "rootfs"
    rootfs.mkdir()
    extract(tarball, rootfs)
    tarball.unlink()


def extract(tarball: Path, rootfs: Path) -> None:
    """The root filesystem's tar into ``rootfs``, every member checked first (:func:`check_members`), then
    tarfile's "tar" filter: no setuid, setgid or sticky bit, no group or other write bit."""
    with tarfile.open(tarball) as archive:
        members = check_members(archive.getmembers())
        archive.extractall(rootfs, members=members, filter=_member_filter)


def check_members(members: Iterable[tarfile.TarInfo]) -> list[tarfile.TarInfo]:
    """The members to extract, each checked on its own names before anything is written; ImageBuildError naming
    the first that is not a plain file, folder or link inside the root.

    Not left to ``filter=``: the filters judge a member by ``os.path.realpath`` of where it would go, on a tree
    the archive's own links already shape, and on Python < 3.11.13 a chain of links longer than PATH_MAX makes
    realpath stop resolving (CVE-2025-4517): a later member is written outside. Here a member's name and link
    target are judged lexically against the members before it: none absolute or with ``..`` past the root, no
    member under (or at the name of) a link an earlier member made, no name twice, a hard link only to an
    earlier regular file. Device files and FIFOs are left out: the sandbox's /dev is gVisor's own."""
    kept: list[tarfile.TarInfo] = []
    made: dict[str, str] = {}  # every name so far ("dir", "file" or "link"), and every folder above one ("dir")
    for member in members:
        if member.ischr() or member.isblk() or member.isfifo():
            continue
        name = _inside(member.name, member, "its name")
        if not name:
            if not member.isdir():
                raise _refused(member, "names the root itself")
            kept.append(member)  # the root's own entry ("./"): its mode
            continue
        if name in made and not (member.isdir() and made[name] == "dir"):
            raise _refused(member, f"appears twice (first as a {made[name]})")
        for parent in _parents(name):
            if made.get(parent, "dir") != "dir":
                raise _refused(member, f"is under {parent!r}, a {made[parent]} the archive made")
        if member.issym():
            target = member.linkname if member.linkname.startswith("/") else \
                posixpath.join(posixpath.dirname(name), member.linkname)
            _inside(target, member, f"its link target {member.linkname!r}")
        elif member.islnk():
            if made.get(_inside(member.linkname, member, f"its hard link target {member.linkname!r}")) != "file":
                raise _refused(member, f"is a hard link to {member.linkname!r}, no regular file of the archive before it")
        elif not member.isreg() and not member.isdir():
            raise _refused(member, f"is of a type an image does not hold ({member.type!r})")
        made.update((parent, "dir") for parent in _parents(name))
        made[name] = "link" if member.issym() else "dir" if member.isdir() else "file"
        kept.append(member)
    return kept


def _inside(path: str, member: tarfile.TarInfo, what: str) -> str:
    """``path`` relative to the root, normalized; ImageBuildError if it is absolute (a member's name) or its
    ``..`` climb past the root. A link's absolute target is read as the sandbox reads it, from the root."""
    if "\x00" in path or (what == "its name" and path.startswith("/")):
        raise _refused(member, f"has {what} absolute or with a NUL")
    parts: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if not parts:
                raise _refused(member, f"has {what} climbing out of the root with '..'")
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _refused(member: tarfile.TarInfo, why: str) -> ImageBuildError:
    return ImageBuildError(f"the root filesystem's tar has a member {member.name[:300]!r} that {why}: nothing of it "
                           "was extracted; the tar is not one mmdebstrap makes")


def _member_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    return tarfile.tar_filter(member, path)  # after check_members: the mode bits


def _python_version(rootfs: Path) -> str:
    target = os.readlink(rootfs / "usr/bin/python3") if (rootfs / "usr/bin/python3").is_symlink() else ""
    found = re.fullmatch(r"python(3\.\d+)", os.path.basename(target))
    if not found:
        raise ImageBuildError("the image has no /usr/bin/python3 -> python3.N: include python3 (every profile does)")
    return found.group(1)


def _glibc(rootfs: Path) -> tuple[int, int]:
    found = re.search(r"^Package: libc6\n(?:.+\n)*?Version: (\d+)\.(\d+)", (rootfs / "var/lib/dpkg/status").read_text(), re.M)
    if not found:
        raise ImageBuildError("the image has no libc6 in its dpkg status")
    return int(found.group(1)), int(found.group(2))


def _platforms(glibc: tuple[int, int]) -> list[str]:
    """The manylinux tags the image's glibc runs, newest first (pip takes no range)."""
    arch = platform.machine()
    tags = [f"manylinux_{glibc[0]}_{minor}_{arch}" for minor in range(glibc[1], 4, -1)]
    if arch in ("x86_64", "i686"):
        tags += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    elif glibc >= (2, 17):
        tags.append(f"manylinux2014_{arch}")
    return tags


def target_options(python_version: str, glibc: tuple[int, int]) -> list[str]:
    """pip's options for the image's interpreter and platform, wheels only."""
    abi = "cp" + python_version.replace(".", "")
    return ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp", "--abi", abi,
            *(f"--platform={tag}" for tag in _platforms(glibc))]


def _lock_and_install(spec: ImageSpec, python_version: str, glibc: tuple[int, int], work: Path,
                      site: Path) -> list[dict[str, str]]:
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    target = target_options(python_version, glibc)
    _run("pip download (resolving the requirements, wheels only)",
         [*pip, "download", "--quiet", "--dest", str(wheels), *target, *spec.requirements()])
    locked = []
    for wheel in sorted(wheels.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        locked.append({"name": name.lower().replace("_", "-"), "version": version, "sha256": store.file_sha256(wheel),
                       "file": wheel.name})
    if len(locked) != len(list(wheels.iterdir())):
        raise ImageBuildError(f"pip left something other than wheels in {wheels}: only wheels go into an image")
    lock = work / "requirements.lock"
    lock.write_text("".join(f"{p['name']}=={p['version']} --hash=sha256:{p['sha256']}\n" for p in locked))
    _run("pip install (the locked wheels, by hash)",
         [*pip, "install", "--quiet", "--no-index", "--find-links", str(wheels), "--no-deps", "--require-hashes",
          "--no-warn-script-location", "--target", str(site), *target, "-r", str(lock)])
    shutil.rmtree(wheels)
    lock.unlink()
    return locked


def _seal(rootfs: Path) -> None:
    """No one writes the image again: its folders lose their write bits (files never had group or other ones)."""
    for folder, dirs, files in os.walk(rootfs):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & 0o555)
        os.chmod(folder, 0o555 if os.lstat(folder).st_mode & 0o005 else 0o500)


def _debian_packages(rootfs: Path) -> list[str]:
    """``name=version`` of every Debian package in the image, from its dpkg status."""
    text = (rootfs / "var/lib/dpkg/status").read_text()
    packages = []
    for block in text.split("\n\n"):
        name = re.search(r"^Package: (.+)$", block, re.M)
        version = re.search(r"^Version: (.+)$", block, re.M)
        if name and version and "install ok installed" in block:
            packages.append(f"{name.group(1)}={version.group(1)}")
    return sorted(packages)
