"""``build.check_members`` (issue 42, finding 7): an image's tar is checked member by member before anything is
extracted, on names alone, since Python 3.11.7's ``filter=`` judges by realpath, which a chain of links longer than
PATH_MAX stops (CVE-2025-4517)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from cellgate.gate.sandbox.images.build import ImageBuildError, check_members, extract


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def names(members: list[tarfile.TarInfo]) -> list[str]:
    return [m.name for m in check_members(members)]


def test_a_debian_like_root_passes_and_devices_are_left_out() -> None:
    root = [member("./", tarfile.DIRTYPE), member("./usr", tarfile.DIRTYPE), member("./usr/bin", tarfile.DIRTYPE),
            member("./usr/bin/python3.11"), member("./usr/bin/python3", tarfile.SYMTYPE, "python3.11"),
            member("./bin", tarfile.SYMTYPE, "usr/bin"), member("./etc", tarfile.DIRTYPE),
            member("./etc/alternatives", tarfile.DIRTYPE),
            member("./etc/alternatives/pager", tarfile.SYMTYPE, "/usr/bin/python3"),  # absolute: from the root
            member("./usr/bin/perl5", tarfile.LNKTYPE, "./usr/bin/python3.11"),
            member("./dev", tarfile.DIRTYPE), member("./dev/null", tarfile.CHRTYPE), member("./fifo", tarfile.FIFOTYPE)]
    assert "./dev/null" not in names(root) and "./fifo" not in names(root) and len(names(root)) == 11


@pytest.mark.parametrize("members, says", [
    ([member("/etc/passwd")], "absolute"),
    ([member("../outside")], "climbing out of the root"),
    ([member("usr/../../outside")], "climbing out of the root"),
    ([member("usr/lib/x", tarfile.SYMTYPE, "../../../etc")], "climbing out of the root"),
    ([member("x", tarfile.SYMTYPE, "/etc"), member("x/passwd")], "under 'x', a link"),
    ([member("x", tarfile.SYMTYPE, "/etc/passwd"), member("x")], "appears twice"),
    ([member("f"), member("f/g")], "under 'f', a file"),
    ([member("h", tarfile.LNKTYPE, "/etc/shadow")], "no regular file of the archive before it"),
    ([member("l", tarfile.SYMTYPE, "/etc/shadow"), member("h", tarfile.LNKTYPE, "l")], "no regular file"),
    ([member("h", tarfile.LNKTYPE, "../../etc/shadow")], "climbing out of the root"),
    ([member("a/b"), member("a", tarfile.SYMTYPE, "/etc")], "appears twice (first as a dir)"),
])
def test_a_member_outside_the_root_or_through_a_link_is_refused(members: list[tarfile.TarInfo], says: str) -> None:
    with pytest.raises(ImageBuildError, match=rf"member .* {re_escape(says)}.*nothing of it was extracted"):
        check_members(members)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def cve_2025_4517_tar() -> bytes:
    """The published chain: folders of 247-character names behind one-letter links, a deep link climbing back
    out through them (past PATH_MAX, so realpath gives up), and a file written through it."""
    data = io.BytesIO()
    component = "d" * 247
    steps = "abcdefghijklmnop"
    with tarfile.open(fileobj=data, mode="w") as archive:
        path = ""
        for step in steps:
            archive.addfile(member(os.path.join(path, component), tarfile.DIRTYPE))
            archive.addfile(member(os.path.join(path, step), tarfile.SYMTYPE, component))
            path = os.path.join(path, component)
        deep = os.path.join(*steps, "l" * 254)
        archive.addfile(member(deep, tarfile.SYMTYPE, "../" * len(steps)))
        archive.addfile(member("escape", tarfile.SYMTYPE, os.path.join(deep, "../outside")))
        payload = b"written outside the root\n"
        written = member("escape/planted")
        written.size = len(payload)
        archive.addfile(written, io.BytesIO(payload))
    return data.getvalue()


def test_the_cve_2025_4517_chain_is_refused_and_nothing_lands_outside(tmp_path: Path) -> None:
    tarball = tmp_path / "rootfs.tar"
    tarball.write_bytes(cve_2025_4517_tar())
    (tmp_path / "outside").mkdir()
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    with pytest.raises(ImageBuildError, match="a link the archive made"):
        extract(tarball, rootfs)
    assert list((tmp_path / "outside").iterdir()) == []
    assert list(rootfs.iterdir()) == []  # refused before anything was extracted
