"""Wheel bombs (issue 42, finding 3): a wheel is read as a central directory and refused over a bound before
anything is written, unpacked counted (a central directory can lie), and a cached wheel is hashed again as it is
read. The installs go through ``PackageInstaller`` as ``%pip install`` and a replay do; the last test through a
sandboxed session's cell, from a local index."""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate.calls.packages import PackageInstaller, PackageRefused
from cellgate.gate.calls.wheels import Limits, WheelRefused, check, copy_bounded, plan

GOOD = "good-1.0-py3-none-any.whl"
BOMB = "bomb-1.0-py3-none-any.whl"
MB = 1 << 20


def wheel(members: dict[str, bytes], compress: int = zipfile.ZIP_DEFLATED) -> bytes:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", compression=compress) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return data.getvalue()


def declare(data: bytes, sizes: dict[str, int]) -> bytes:
    """``data`` with its central directory stating ``sizes`` (uncompressed) for the named members: a lie."""
    out = bytearray(data)
    at = out.find(b"PK\x01\x02")
    while at != -1:
        name_len = struct.unpack_from("<H", out, at + 28)[0]
        name = bytes(out[at + 46:at + 46 + name_len]).decode()
        if name in sizes:
            struct.pack_into("<I", out, at + 24, sizes[name])
        at = out.find(b"PK\x01\x02", at + 46)
    return bytes(out)


def kept(installer: PackageInstaller, file: str, data: bytes) -> dict[str, str]:
    """``data`` in the wheel cache as ``file``, and the recorded entry that names it."""
    digest = hashlib.sha256(data).hexdigest()
    (installer.cache / digest).mkdir(parents=True, exist_ok=True)
    (installer.cache / digest / file).write_bytes(data)
    return {"name": file.split("-")[0], "version": "1.0", "sha256": digest, "file": file}


def listing(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.lstat().st_size) for p in folder.rglob("*"))


@pytest.fixture
def installer(tmp_path: Path) -> PackageInstaller:
    (tmp_path / "packages" / "layer").mkdir(parents=True)
    return PackageInstaller(tmp_path / "packages" / "layer", [], ["good", "bomb"], 256 * MB, cache=tmp_path / "cache")


def test_a_plain_wheel_is_unpacked_as_pip_would(installer: PackageInstaller) -> None:
    data = wheel({"good/__init__.py": b"X = 1\n", "good-1.0.dist-info/METADATA": b"Name: good\nVersion: 1.0\n",
                  "good-1.0.data/purelib/extra.py": b"", "good-1.0.data/scripts/tool": b"#!python\n"})
    installer.reinstall({"installed": [kept(installer, GOOD, data)]})
    names = {name for name, _ in listing(installer.layer)}
    assert {"good/__init__.py", "good-1.0.dist-info/METADATA", "extra.py", "bin/tool"} <= names
    assert stat.S_IMODE((installer.layer / "good" / "__init__.py").stat().st_mode) == 0o644
    assert [p.name for p in installer.layer.parent.iterdir()] == ["layer"]  # no staging left


def test_a_1_mb_wheel_declaring_5_gb_is_refused_before_anything_is_written(installer: PackageInstaller) -> None:
    filler = os.urandom(MB)  # the wheel is 1 MB
    data = declare(wheel({"bomb/blob.bin": filler, **{f"bomb/part{i}.bin": b"0" * 1000 for i in range(5)}}),
                   {f"bomb/part{i}.bin": 1000 * MB for i in range(5)})
    assert MB < len(data) < 2 * MB
    entry = kept(installer, BOMB, data)
    before = listing(installer.layer.parent)
    with pytest.raises(WheelRefused) as refused:
        installer.reinstall({"installed": [entry]})
    assert refused.value.code == "max_unpacked_mb" and refused.value.wheel == BOMB
    assert "declare 5001 MB unpacked" in str(refused.value)
    assert "over [packages] max_unpacked_mb = 1024" in str(refused.value) and "raise max_unpacked_mb" in str(refused.value)
    assert listing(installer.layer.parent) == before  # not a folder made, not a byte written


def test_a_wheel_whose_central_directory_understates_a_file_is_stopped_at_its_size(installer: PackageInstaller) -> None:
    # 64 MB of zeros inflate from 64 KB; the central directory says 1 MB.
    data = declare(wheel({"bomb/__init__.py": b"", "bomb/zeros.bin": bytes(64 * MB)}), {"bomb/zeros.bin": MB})
    entry = kept(installer, BOMB, data)
    with pytest.raises(WheelRefused) as refused:
        installer.reinstall({"installed": [entry]})
    assert refused.value.code == "corrupt"
    assert "'bomb/zeros.bin' does not match its entry" in str(refused.value)
    stopped = re.search(r"stopped at (\d+) bytes of the (\d+) it declares", str(refused.value))
    assert stopped and int(stopped.group(1)) <= MB == int(stopped.group(2))  # never a byte past what it declared
    assert listing(installer.layer) == [] and [p.name for p in installer.layer.parent.iterdir()] == ["layer"]


def test_the_counter_stops_any_stream_at_its_declared_size_and_at_the_install_budget() -> None:
    out = io.BytesIO()
    with pytest.raises(WheelRefused, match="holds more than the 1000 bytes its central directory declares"):
        copy_bounded(io.BytesIO(bytes(5000)), out, 1000, [10 * MB], BOMB, "bomb/x")
    assert len(out.getvalue()) <= 1000
    out = io.BytesIO()
    budget = [1000]
    with pytest.raises(WheelRefused, match=r"came to its bound, \[packages\] max_unpacked_mb"):
        copy_bounded(io.BytesIO(bytes(5000)), out, 5000, budget, BOMB, "bomb/x")
    assert len(out.getvalue()) <= 1000


@pytest.mark.parametrize("members, limits, code", [
    ({f"bomb/{i}.py": b"" for i in range(11)}, Limits(total_bytes=MB, file_bytes=MB, files=10), "files"),
    ({"bomb/big.bin": os.urandom(2 * MB)}, Limits(total_bytes=10 * MB, file_bytes=MB), "max_mb"),
    ({"bomb/zeros.bin": bytes(8 * MB)}, Limits(total_bytes=10 * MB, file_bytes=10 * MB), "ratio"),
])
def test_each_bound_is_checked_on_the_central_directory(members: dict[str, bytes], limits: Limits, code: str) -> None:
    with zipfile.ZipFile(io.BytesIO(wheel(members))) as archive:
        with pytest.raises(WheelRefused) as refused:
            check([(BOMB, plan(archive, BOMB))], limits, held=0)
    assert refused.value.code == code


def test_what_the_layer_holds_counts_against_max_unpacked_mb(tmp_path: Path) -> None:
    (tmp_path / "packages" / "layer").mkdir(parents=True)
    small = PackageInstaller(tmp_path / "packages" / "layer", [], ["good"], MB, cache=tmp_path / "cache",
                             max_unpacked_bytes=2 * MB + MB // 2)
    first = kept(small, GOOD, wheel({"good/a.bin": os.urandom(MB)}))
    small.reinstall({"installed": [first]})
    second = kept(small, "good-1.0-py2-none-any.whl", wheel({"good/b.bin": os.urandom(MB), "good/c.bin": os.urandom(MB)}))
    with pytest.raises(WheelRefused, match=r"the session's packages hold 1 MB: over \[packages\] max_unpacked_mb = 2"):
        small.reinstall({"installed": [second]})


def symlink_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize("name, code, says", [
    ("/etc/cron.d/x", "name", "is absolute"), ("../outside.py", "name", "has '..'"),
    ("bomb/../../outside.py", "name", "has '..'"), ("bomb\\..\\..\\x.py", "name", "not a plain relative name"),
    ("C:/x.py", "name", "not a plain relative name"), ("bomb-1.0.data/elsewhere/x", "name", "no install scheme"),
    ("bomb/link", "link", "is a symbolic link"), ("bomb/fifo", "link", "is not a file or a folder"),
])
def test_a_name_that_leaves_the_layer_or_a_link_is_refused(installer: PackageInstaller, name: str, code: str,
                                                           says: str) -> None:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("bomb/__init__.py", b"")
        if code == "link" and name.endswith("link"):
            archive.writestr(symlink_info(name), b"/etc/passwd")
        elif name.endswith("fifo"):
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFIFO | 0o644) << 16
            archive.writestr(info, b"")
        else:
            archive.writestr(name, b"x")
    entry = kept(installer, BOMB, data.getvalue())
    with pytest.raises(WheelRefused) as refused:
        installer.reinstall({"installed": [entry]})
    assert refused.value.code == code and says in str(refused.value) and "nothing was installed" in str(refused.value)
    assert listing(installer.layer) == []


def test_a_cached_wheel_changed_on_disk_is_refused(installer: PackageInstaller) -> None:
    entry = kept(installer, GOOD, wheel({"good/__init__.py": b"X = 1\n"}))
    cached = installer.cache / entry["sha256"] / GOOD
    installer.reinstall({"installed": [entry]})
    cached.write_bytes(wheel({"good/__init__.py": b"import os; os.system('id')\n"}))
    with pytest.raises(WheelRefused, match="has changed on disk") as refused:
        installer.reinstall({"installed": [entry]})
    assert refused.value.code == "changed"
    assert (installer.layer / "good" / "__init__.py").read_bytes() == b"X = 1\n"
    cached.unlink()
    cached.symlink_to(installer.layer / "good" / "__init__.py")  # a link in its place is not followed
    with pytest.raises(PackageRefused, match="is not in the wheel cache"):
        installer.reinstall({"installed": [entry]})


def test_a_cell_installing_a_wheel_bomb_from_the_index_gets_the_refusal(
        session_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    index.mkdir()
    metadata = {"bomb-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: bomb\nVersion: 1.0\n",
                "bomb-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    (index / BOMB).write_bytes(declare(wheel({**metadata, "bomb/__init__.py": b"", **{f"bomb/p{i}.bin": b"0" * 100
                                                                          for i in range(5)}}),
                                       {f"bomb/p{i}.bin": 1000 * MB for i in range(5)}))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("CELLGATE_WHEEL_CACHE", str(tmp_path / "cache"))
    config = tmp_path / "cellgate.toml"
    config.write_text('[packages]\nallow = ["bomb"]\nmax_mb = 16\n\n[policy]\ndefault = "deny"\n\n'
                      '[policy.tools.pip_install]\ndecision = "allow"\n')
    box = session_factory(config=str(config), tools=[], notebook=tmp_path / "run.ipynb")
    refused = box.execute("%pip install bomb")
    assert not refused.ok
    assert "over [packages] max_unpacked_mb = 64" in refused.text, refused.text
    assert box.execute("import bomb").error["ename"] == "ModuleNotFoundError"
    box.close()
