"""A wheel is hostile input: each test here builds real wheel zips (``zipfile``, some with their central directory
edited to lie) and asserts what ``calls.wheels`` does with them: refused before anything is written when a
declared size, count or ratio is over its bound, stopped while copying when the data says more than the central
directory, no member leaving the layer or being a link, and a changed cached wheel never unpacked. Each exact
assertion kills mutants of calls/wheels.py that looser tests let through (scripts/mutation wheels; CONTRIBUTING,
"Mutation testing")."""

from __future__ import annotations

import contextlib
import hashlib
import io
import marshal
import os
import stat
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cellgate.gate.calls.wheels import (
    CHUNK,
    MAX_FILES,
    MAX_RATIO,
    RATIO_FROM,
    Limits,
    Member,
    PackageRefused,
    WheelRefused,
    check,
    copy_bounded,
    data_dir,
    install,
    open_verified,
    plan,
    tree_bytes,
    unpack,
)

MB = 1 << 20
WHEEL = "demo-1.0-py3-none-any.whl"
DATA = "demo-1.0.data"
ROOMY = Limits(total_bytes=64 * MB, file_bytes=16 * MB)


def wheel_bytes(*members: tuple[str, bytes, int], compression: int = zipfile.ZIP_STORED) -> bytes:
    """A zip of ``(name, data, mode)`` members; ``mode`` is the unix mode in the high bits of external_attr."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", compression=compression) as archive:
        for name, content, mode in members:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            info.compress_type = compression
            archive.writestr(info, content)
    return data.getvalue()


def regular(name: str, content: bytes = b"x", mode: int = 0o644) -> tuple[str, bytes, int]:
    return name, content, stat.S_IFREG | mode


def folder(name: str) -> tuple[str, bytes, int]:
    return name, b"", stat.S_IFDIR | 0o755


CENTRAL = {"flag_bits": (8, "<H"), "crc": (16, "<I"), "compress_size": (20, "<I"), "file_size": (24, "<I"),
           "external_attr": (38, "<I")}


def lie(data: bytes, name: str, **fields: int) -> bytes:
    """``data`` with the central directory entry of ``name`` edited (what a hostile wheel declares)."""
    edited = bytearray(data)
    at = edited.find(b"PK\x01\x02")
    found = False
    while at != -1:
        length = struct.unpack_from("<H", edited, at + 28)[0]
        if edited[at + 46:at + 46 + length] == name.encode():
            for field, value in fields.items():
                offset, form = CENTRAL[field]
                struct.pack_into(form, edited, at + offset, value)
            found = True
        at = edited.find(b"PK\x01\x02", at + 4)
    assert found, name
    return bytes(edited)


def archive_of(data: bytes) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(data))


def refusal(data: bytes, file: str = WHEEL) -> WheelRefused:
    with pytest.raises(WheelRefused) as refused:
        plan(archive_of(data), file)
    return refused.value


def entry(name: str, size: int, packed: int | None = None) -> Member:
    """A member as a central directory declares it (``check`` reads nothing else)."""
    info = zipfile.ZipInfo(name)
    info.file_size, info.compress_size = size, size if packed is None else packed
    return Member(info, name)


@pytest.fixture
def layer(tmp_path: Path) -> Path:
    folder = tmp_path / "session" / "layer"
    folder.mkdir(parents=True)
    return folder


@contextlib.contextmanager
def no_default_tmp(tmp_path: Path) -> Iterator[None]:
    """The default temporary folder is one that does not exist, while the block runs: a staging or copy made
    anywhere but where the code says (beside the layer, in the cache) fails."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(tmp_path / "no-default-tmp")
    try:
        yield
    finally:
        tempfile.tempdir = saved


@pytest.fixture
def umask_077() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def run_install(layer: Path, *wheels: tuple[str, bytes], limits: Limits = ROOMY, compile_pyc: bool = False) -> None:
    install(layer, [(file, io.BytesIO(data)) for file, data in wheels], limits, compile_pyc)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- names and links: plan


def test_data_dir_is_name_and_version_from_the_file_name() -> None:
    assert data_dir("demo-1.0-py3-none-any.whl") == "demo-1.0.data"
    assert data_dir("my_pkg-2.0.1-1-cp311-cp311-manylinux_2_17_x86_64.whl") == "my_pkg-2.0.1.data"


def test_plan_maps_the_data_folder_schemes_as_pip_target_does() -> None:
    data = wheel_bytes(folder("demo/"), regular("demo/__init__.py"), regular("demo-1.0.dist-info/METADATA"),
                       regular(f"{DATA}/purelib/pure.py"), regular(f"{DATA}/platlib/plat/x.so"),
                       regular(f"{DATA}/data/share/doc.txt"), regular(f"{DATA}/scripts/tool", mode=0o755),
                       regular(f"{DATA}/headers/demo.h"), folder(f"{DATA}/"), folder(f"{DATA}/purelib/"),
                       regular(f"{DATA}/scripts", b""), regular("demo/MATRIX"))
    assert [member.dest for member in plan(archive_of(data), WHEEL)] == [
        "demo", "demo/__init__.py", "demo-1.0.dist-info/METADATA", "pure.py", "plat/x.so", "share/doc.txt",
        "bin/tool", "include/demo/demo.h", DATA, f"{DATA}/purelib", f"{DATA}/scripts", "demo/MATRIX"]
    members = plan(archive_of(data), WHEEL)
    assert [member.info.filename for member in members][:2] == ["demo/", "demo/__init__.py"]


def test_a_member_of_mode_zero_is_a_plain_file() -> None:
    # zip tools that are not unix ones leave the mode out: a file all the same
    data = wheel_bytes(("demo/a.py", b"a", 0), folder("demo/d/"))
    assert [member.dest for member in plan(archive_of(data), WHEEL)] == ["demo/a.py", "demo/d"]


@pytest.mark.parametrize("name", [
    "/etc/passwd", "../escape.py", "demo/../../escape.py", "demo/./x.py", "demo//x.py", "demo\\..\\x.py",
    "C:/x.py", "C:x.py", ".", "..", "demo/..",
])
def test_a_member_name_that_could_leave_the_layer_is_refused(name: str) -> None:
    refused = refusal(wheel_bytes(regular("demo/ok.py"), regular(name)))
    assert str(refused) == (f"{WHEEL}: the member {name!r} is absolute, has '..', or is not a plain relative name: "
                            "nothing was installed")
    assert (refused.wheel, refused.code, refused.value) == (WHEEL, "name", name)
    assert isinstance(refused, PackageRefused)


def test_an_empty_member_name_is_refused() -> None:
    refused = refusal(wheel_bytes(regular("demo/a.py"), regular("")))
    assert str(refused) == f"{WHEEL}: the member '' is absolute, has '..', or is not a plain relative name: nothing " \
                           "was installed"


def test_a_name_in_the_data_folder_outside_the_install_schemes_is_refused() -> None:
    refused = refusal(wheel_bytes(regular(f"{DATA}/evil/x.py")))
    assert str(refused) == (f"{WHEEL}: the member '{DATA}/evil/x.py' is in {DATA}/evil, which is no install scheme: "
                            "nothing was installed")
    assert (refused.code, refused.value) == ("name", f"{DATA}/evil/x.py")


def test_another_wheels_data_folder_is_a_plain_top_level_name() -> None:
    data = wheel_bytes(regular("other-1.0.data/purelib/x.py"))
    assert [member.dest for member in plan(archive_of(data), WHEEL)] == ["other-1.0.data/purelib/x.py"]


def test_a_symbolic_link_member_is_refused() -> None:
    refused = refusal(wheel_bytes(regular("demo/a.py"), ("demo/link", b"/etc/passwd", stat.S_IFLNK | 0o777)))
    assert str(refused) == f"{WHEEL}: the member 'demo/link' is a symbolic link (a wheel holds files only): nothing " \
                           "was installed"
    assert (refused.wheel, refused.code, refused.value) == (WHEEL, "link", "demo/link")


@pytest.mark.parametrize("kind, mode", [(stat.S_IFCHR, "20644"), (stat.S_IFIFO, "10644"), (stat.S_IFBLK, "60644"),
                                        (stat.S_IFSOCK, "140644")])
def test_a_device_fifo_or_socket_member_is_refused(kind: int, mode: str) -> None:
    refused = refusal(wheel_bytes(("demo/dev", b"", kind | 0o644)))
    assert str(refused) == (f"{WHEEL}: the member 'demo/dev' is not a file or a folder (mode {mode}): nothing was "
                            "installed")
    assert (refused.code, refused.value) == ("link", "demo/dev")


def test_an_encrypted_member_is_refused_and_other_flag_bits_are_not() -> None:
    data = wheel_bytes(regular("demo/a.py"), regular("demo/b.py"))
    refused = refusal(lie(data, "demo/b.py", flag_bits=0x1))
    assert str(refused) == f"{WHEEL}: the member 'demo/b.py' is encrypted: nothing was installed"
    assert (refused.code, refused.value) == ("corrupt", "demo/b.py")
    for flags in (0x2, 0x4, 0x8, 0x800):
        assert [m.dest for m in plan(archive_of(lie(data, "demo/b.py", flag_bits=flags)), WHEEL)] == [
            "demo/a.py", "demo/b.py"]


def test_two_members_with_one_destination_are_refused() -> None:
    refused = refusal(wheel_bytes(regular("x.py"), regular(f"{DATA}/purelib/x.py")))
    assert str(refused) == f"{WHEEL}: the member '{DATA}/purelib/x.py' is in the wheel twice: nothing was installed"
    assert (refused.code, refused.value) == ("name", f"{DATA}/purelib/x.py")


def test_a_long_refused_name_is_cut_to_200_characters() -> None:
    name = "demo/" + "n" * 300
    refused = refusal(wheel_bytes((name, b"", stat.S_IFLNK | 0o777)))
    assert refused.value == name[:200]
    assert str(refused) == (f"{WHEEL}: the member {name[:200]!r} is a symbolic link (a wheel holds files only): "
                            "nothing was installed")


# -- the bounds, from the central directories alone: check


def test_the_install_may_hold_exactly_its_bounds() -> None:
    limits = Limits(total_bytes=10 * MB, file_bytes=4 * MB, files=3)
    check([("a.whl", [entry("a/1", 4 * MB), entry("a/2", 3 * MB)]), ("b.whl", [entry("b/1", 2 * MB)])], limits,
          held=MB)


def test_more_files_than_the_bound_across_the_install_are_refused() -> None:
    limits = Limits(total_bytes=10 * MB, file_bytes=4 * MB, files=3)
    with pytest.raises(WheelRefused) as refused:
        check([("a.whl", [entry("a/1", 1), entry("a/2", 1)]), ("b.whl", [entry("b/1", 1), entry("b/2", 1)])],
              limits, held=0)
    assert str(refused.value) == "the wheels of this install hold more than 3 files (at b.whl): nothing was installed"
    assert (refused.value.wheel, refused.value.code, refused.value.value) == ("b.whl", "files", 4)
    assert Limits(1, 1).files == MAX_FILES and Limits(1, 1).ratio == MAX_RATIO


def test_declared_sizes_over_max_unpacked_mb_with_what_the_layer_holds_are_refused() -> None:
    limits = Limits(total_bytes=10 * MB, file_bytes=8 * MB)
    planned = [("a.whl", [entry("a/1", 3 * MB)]), ("b.whl", [entry("b/1", 5 * MB), entry("b/2", 1)])]
    check(planned[:1] + [("b.whl", [entry("b/1", 5 * MB)])], limits, held=2 * MB)  # exactly 10 MB: allowed
    with pytest.raises(WheelRefused) as refused:
        check(planned, limits, held=2 * MB)
    assert str(refused.value) == (
        "the wheels of this install declare 8 MB unpacked (at b.whl), and the session's packages hold 2 MB: over "
        "[packages] max_unpacked_mb = 10; nothing was installed (raise max_unpacked_mb if these wheels are meant to "
        "be that large)")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == ("b.whl", "max_unpacked_mb",
                                                                              10 * MB + 1)


def test_the_install_total_is_checked_before_any_one_file() -> None:
    # a.whl's one file is over max_mb, b.whl brings the install over max_unpacked_mb: the install's bound is named
    limits = Limits(total_bytes=10 * MB, file_bytes=4 * MB)
    with pytest.raises(WheelRefused) as refused:
        check([("a.whl", [entry("a/1", 5 * MB)]), ("b.whl", [entry("b/1", 6 * MB)])], limits, held=0)
    assert refused.value.code == "max_unpacked_mb"


def test_one_file_over_max_mb_is_refused() -> None:
    limits = Limits(total_bytes=64 * MB, file_bytes=4 * MB)
    check([("a.whl", [entry("a/ok", 4 * MB)])], limits, held=0)
    with pytest.raises(WheelRefused) as refused:
        check([("a.whl", [entry("a/ok", 1)]), ("b.whl", [entry("b/ok", 1), entry("b/big", 5 * MB + 7)])], limits,
              held=0)
    assert str(refused.value) == ("b.whl: 'b/big' unpacks to 5 MB, over [packages] max_mb = 4 for one file: nothing "
                                  "was installed; raise max_mb to install it")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == ("b.whl", "max_mb", 5 * MB + 7)
    with pytest.raises(WheelRefused, match="max_mb"):
        check([("a.whl", [entry("a/big", 4 * MB + 1)])], limits, held=0)


def test_a_file_that_inflates_more_than_the_ratio_bound_is_a_wheel_bomb() -> None:
    limits = Limits(total_bytes=64 * MB, file_bytes=16 * MB, ratio=200)
    check([("a.whl", [entry("a/x", 200 * 8192, packed=8192)])], limits, held=0)  # exactly 200 times: allowed
    check([("a.whl", [entry("a/x", RATIO_FROM - 1, packed=1)])], limits, held=0)  # small files: MAX_FILES bounds them
    with pytest.raises(WheelRefused) as refused:
        check([("a.whl", [entry("a/x", 200 * 8192 + 1, packed=8192)])], limits, held=0)
    assert str(refused.value) == ("a.whl: 'a/x' unpacks to 1638401 bytes from 8192, more than 200 times: a wheel bomb; "
                                  "nothing was installed")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == ("a.whl", "ratio", 200)
    with pytest.raises(WheelRefused) as refused:
        check([("a.whl", [entry("a/x", RATIO_FROM, packed=1)])], limits, held=0)
    assert refused.value.value == RATIO_FROM
    with pytest.raises(WheelRefused) as refused:  # a central directory declaring nothing compressed
        check([("a.whl", [entry("a/x", RATIO_FROM + 3, packed=0)])], limits, held=0)
    assert str(refused.value) == (f"a.whl: 'a/x' unpacks to {RATIO_FROM + 3} bytes from 0, more than 200 times: a "
                                  "wheel bomb; nothing was installed")
    assert refused.value.value == RATIO_FROM + 3
    loose = Limits(total_bytes=64 * MB, file_bytes=16 * MB, ratio=RATIO_FROM)
    check([("a.whl", [entry("a/x", RATIO_FROM, packed=1)])], loose, held=0)
    with pytest.raises(WheelRefused) as refused:  # one byte packed: the bound is the ratio times one
        check([("a.whl", [entry("a/x", RATIO_FROM + 1, packed=1)])], loose, held=0)
    assert refused.value.code == "ratio"


# -- copying, counted: copy_bounded


def test_copy_bounded_copies_up_to_the_declared_size_and_spends_the_budget() -> None:
    data = os.urandom(2 * CHUNK + 10)
    out, budget = io.BytesIO(), [len(data)]
    copy_bounded(io.BytesIO(data), out, len(data), budget, WHEEL, "demo/x")
    assert out.getvalue() == data and budget == [0]
    out, budget = io.BytesIO(), [len(data) + 5]
    copy_bounded(io.BytesIO(b""), out, 0, budget, WHEEL, "demo/empty")
    assert out.getvalue() == b"" and budget == [len(data) + 5]


def test_data_past_the_declared_size_stops_the_copy() -> None:
    data = os.urandom(2 * CHUNK)
    out, budget = io.BytesIO(), [10 * CHUNK]
    with pytest.raises(WheelRefused) as refused:
        copy_bounded(io.BytesIO(data), out, CHUNK + 1, budget, WHEEL, "demo/x")
    assert str(refused.value) == (f"{WHEEL}: 'demo/x' holds more than the {CHUNK + 1} bytes its central directory "
                                  f"declares: a wheel bomb, stopped at {CHUNK + 1}; nothing was installed")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == (WHEEL, "corrupt", 2 * CHUNK)
    assert out.getvalue() == data[:CHUNK] and budget == [9 * CHUNK]
    with pytest.raises(WheelRefused, match="holds more than the 4 bytes"):
        copy_bounded(io.BytesIO(b"12345"), io.BytesIO(), 4, [100], WHEEL, "demo/x")


def test_data_past_the_install_budget_stops_the_copy() -> None:
    out, budget = io.BytesIO(), [CHUNK + 4]
    with pytest.raises(WheelRefused) as refused:
        copy_bounded(io.BytesIO(os.urandom(2 * CHUNK)), out, 2 * CHUNK, budget, WHEEL, "demo/x")
    assert str(refused.value) == (f"{WHEEL}: the install came to its bound, [packages] max_unpacked_mb, while writing "
                                  "'demo/x': stopped; nothing was installed")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == (WHEEL, "max_unpacked_mb", 2 * CHUNK)
    assert len(out.getvalue()) == CHUNK and budget == [4]
    with pytest.raises(WheelRefused, match="came to its bound"):
        copy_bounded(io.BytesIO(b"12345"), io.BytesIO(), 5, [4], WHEEL, "demo/x")


# -- unpacking into staging: unpack


def test_unpack_writes_each_file_with_its_mode_and_the_folders(tmp_path: Path, umask_077: None) -> None:
    data = wheel_bytes(folder("demo/sub/"), regular("demo/a.py", b"A = 1\n"),
                       regular(f"{DATA}/scripts/tool", b"#!/bin/sh\n", mode=0o700), regular("demo/x", b"x", 0o100),
                       ("demo/plain", b"p", 0), regular("demo/o", b"o", 0o601), regular("demo/w", b"w", 0o602),
                       regular("demo/g", b"g", 0o610))
    archive = archive_of(data)
    budget = [1000]
    unpack(archive, WHEEL, plan(archive, WHEEL), tmp_path, budget)
    assert (tmp_path / "demo" / "sub").is_dir()
    assert (tmp_path / "demo" / "a.py").read_bytes() == b"A = 1\n" and mode_of(tmp_path / "demo" / "a.py") == 0o644
    assert (tmp_path / "bin" / "tool").read_bytes() == b"#!/bin/sh\n" and mode_of(tmp_path / "bin" / "tool") == 0o755
    assert mode_of(tmp_path / "demo" / "x") == 0o755 and mode_of(tmp_path / "demo" / "plain") == 0o644
    assert [mode_of(tmp_path / "demo" / name) for name in "owg"] == [0o755, 0o644, 0o755]  # any execute bit
    assert budget == [1000 - 6 - 10 - 1 - 1 - 3]


def test_a_folder_entry_for_a_folder_already_made_is_no_error(layer: Path) -> None:
    first = wheel_bytes(regular("shared/a.py", b"a"), folder("shared/"), folder("shared/sub/"))
    second = wheel_bytes(folder("shared/"), folder("shared/sub/"), regular("shared/b.py", b"b"))
    run_install(layer, (WHEEL, first), ("b-1.0-py3-none-any.whl", second))
    assert sorted(os.listdir(layer / "shared")) == ["a.py", "b.py", "sub"]


def test_unpacking_past_the_install_budget_names_the_wheel_and_the_member(tmp_path: Path) -> None:
    archive = archive_of(wheel_bytes(regular("demo/a.py", b"1234"), regular("demo/b.py", b"56789")))
    budget = [8]
    with pytest.raises(WheelRefused) as refused:
        unpack(archive, WHEEL, plan(archive, WHEEL), tmp_path, budget)
    assert str(refused.value) == (f"{WHEEL}: the install came to its bound, [packages] max_unpacked_mb, while writing "
                                  "'demo/b.py': stopped; nothing was installed")
    assert budget == [4] and (tmp_path / "demo" / "b.py").read_bytes() == b""


def test_a_folder_entry_does_not_end_the_unpacking(tmp_path: Path) -> None:
    data = wheel_bytes(folder("demo/"), regular("demo/a.py", b"a"), folder("other/"), regular("other/b.py", b"b"))
    archive = archive_of(data)
    unpack(archive, WHEEL, plan(archive, WHEEL), tmp_path, [100])
    assert (tmp_path / "demo" / "a.py").read_bytes() == b"a" and (tmp_path / "other" / "b.py").read_bytes() == b"b"


def test_data_that_does_not_match_its_entry_stops_the_install(tmp_path: Path) -> None:
    content = os.urandom(CHUNK + 100)
    data = bytearray(wheel_bytes(regular("demo/ok.py", b"ok"), regular("demo/x.bin", content)))
    at = bytes(data).find(content)
    data[at + CHUNK + 50] ^= 0xFF  # a byte of the stored data changed: the CRC is checked at the declared size
    archive = archive_of(bytes(data))
    with pytest.raises(WheelRefused) as refused:
        unpack(archive, WHEEL, plan(archive, WHEEL), tmp_path, [10 * CHUNK])
    assert str(refused.value) == (
        f"{WHEEL}: 'demo/x.bin' does not match its entry in the wheel's central directory (Bad CRC-32 for file "
        f"'demo/x.bin'), stopped at {CHUNK} bytes of the {CHUNK + 100} it declares: the wheel is corrupt or a wheel "
        "bomb; nothing was installed")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == (WHEEL, "corrupt", CHUNK)


def test_a_central_directory_that_understates_a_file_stops_it_at_the_declared_size(tmp_path: Path) -> None:
    bomb = b"\0" * (4 * CHUNK)
    data = lie(wheel_bytes(regular("demo/x.bin", bomb), compression=zipfile.ZIP_DEFLATED), "demo/x.bin",
               file_size=100)
    archive = archive_of(data)
    members = plan(archive, WHEEL)
    check([(WHEEL, members)], ROOMY, held=0)  # the central directory says 100 bytes: within every bound
    with pytest.raises(WheelRefused) as refused:
        unpack(archive, WHEEL, members, tmp_path, [10 * CHUNK])
    assert refused.value.code == "corrupt"
    assert "'demo/x.bin' does not match its entry" in str(refused.value)
    assert "of the 100 it declares" in str(refused.value)
    assert (tmp_path / "demo" / "x.bin").stat().st_size <= 100


def test_a_later_wheel_of_the_install_replaces_a_file_an_earlier_one_wrote(layer: Path) -> None:
    run_install(layer, ("a-1.0-py3-none-any.whl", wheel_bytes(regular("shared/x.py", b"from a"))),
                ("b-1.0-py3-none-any.whl", wheel_bytes(regular("shared/x.py", b"from b"))))
    assert (layer / "shared" / "x.py").read_bytes() == b"from b"


# -- a whole install: install


def test_an_install_replaces_the_layers_items_of_the_same_name_and_keeps_the_others(
        layer: Path, umask_077: None) -> None:
    (layer / "demo").mkdir()
    (layer / "demo" / "old.py").write_text("old")
    (layer / "flat.py").write_text("old flat")
    elsewhere = layer.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("not the layer's")
    (layer / "linked").symlink_to(elsewhere)
    (layer / "kept.py").write_text("kept")
    data = wheel_bytes(regular("demo/__init__.py", b"new"), regular("flat.py", b"new flat"),
                       regular("linked/x.py", b"x"), regular("deep/er/est.py", b"d"))
    with no_default_tmp(layer.parent):
        run_install(layer, (WHEEL, data))
    assert sorted(os.listdir(layer)) == ["deep", "demo", "flat.py", "kept.py", "linked"]
    assert os.listdir(layer / "demo") == ["__init__.py"]
    assert (layer / "flat.py").read_text() == "new flat" and (layer / "kept.py").read_text() == "kept"
    assert not (layer / "linked").is_symlink() and (layer / "linked" / "x.py").read_text() == "x"
    assert (elsewhere / "keep.txt").read_text() == "not the layer's"  # a link in the layer: replaced, not followed
    for path in (layer / "demo", layer / "deep", layer / "deep" / "er", layer / "linked"):
        assert mode_of(path) == 0o755, path  # the sandbox's user reads the layer, whatever the umask
    assert mode_of(layer / "demo" / "__init__.py") == 0o644
    assert [p.name for p in layer.parent.iterdir() if p.name.startswith(".unpack-")] == []  # the staging is gone


def test_an_install_refused_while_copying_leaves_the_layer_as_it_was(layer: Path) -> None:
    (layer / "demo").mkdir()
    (layer / "demo" / "old.py").write_text("old")
    good = wheel_bytes(regular("demo/new.py", b"new"))
    bad = lie(wheel_bytes(regular("other/x.bin", b"\0" * 1000), compression=zipfile.ZIP_DEFLATED), "other/x.bin",
              file_size=10)
    with pytest.raises(WheelRefused) as refused:
        run_install(layer, (WHEEL, good), ("other-1.0-py3-none-any.whl", bad))
    assert str(refused.value).startswith("other-1.0-py3-none-any.whl: 'other/x.bin' does not match its entry")
    assert (refused.value.wheel, refused.value.code) == ("other-1.0-py3-none-any.whl", "corrupt")
    assert os.listdir(layer) == ["demo"] and os.listdir(layer / "demo") == ["old.py"]
    assert [p.name for p in layer.parent.iterdir()] == ["layer"]  # and no staging is left beside it


def test_a_wheel_bomb_is_refused_before_anything_is_written(layer: Path) -> None:
    bomb = wheel_bytes(regular("demo/zeros.bin", b"\0" * (4 * MB)), compression=zipfile.ZIP_DEFLATED)
    assert len(bomb) < 8 * 1024  # a 4 MB file in a few kilobytes
    with pytest.raises(WheelRefused) as refused:
        run_install(layer, (WHEEL, bomb))
    assert refused.value.code == "ratio" and refused.value.wheel == WHEEL
    assert os.listdir(layer) == [] and [p.name for p in layer.parent.iterdir()] == ["layer"]


def test_what_the_layer_holds_counts_against_max_unpacked_mb(layer: Path) -> None:
    (layer / "old").mkdir()
    (layer / "old" / "big.bin").write_bytes(b"o" * (3 * MB))
    data = wheel_bytes(regular("demo/a.bin", b"a" * MB))
    with pytest.raises(WheelRefused) as refused:
        run_install(layer, (WHEEL, data), limits=Limits(total_bytes=4 * MB - 1, file_bytes=4 * MB))
    assert refused.value.code == "max_unpacked_mb" and refused.value.value == 4 * MB
    assert "the session's packages hold 3 MB" in str(refused.value)
    run_install(layer, (WHEEL, data), limits=Limits(total_bytes=4 * MB, file_bytes=4 * MB))
    assert (layer / "demo" / "a.bin").stat().st_size == MB


def test_a_file_that_is_not_a_zip_is_refused_naming_the_wheel(layer: Path) -> None:
    with pytest.raises(WheelRefused) as refused:
        run_install(layer, (WHEEL, wheel_bytes(regular("demo/a.py"))), ("bad-1.0-py3-none-any.whl", b"not a zip"))
    assert str(refused.value) == ("bad-1.0-py3-none-any.whl is not a readable wheel (File is not a zip file): nothing "
                                  "was installed")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == (
        "bad-1.0-py3-none-any.whl", "corrupt", "File is not a zip file")
    assert os.listdir(layer) == []


def test_a_refused_name_in_a_later_wheel_writes_nothing_of_the_earlier_ones(layer: Path) -> None:
    with pytest.raises(WheelRefused, match="is a symbolic link"):
        run_install(layer, (WHEEL, wheel_bytes(regular("demo/a.py"))),
                    ("b-1.0-py3-none-any.whl", wheel_bytes(("b/link", b"/", stat.S_IFLNK | 0o777))))
    assert os.listdir(layer) == [] and [p.name for p in layer.parent.iterdir()] == ["layer"]


def test_compiling_puts_bytecode_beside_the_sources_and_says_nothing(layer: Path, capfd: pytest.CaptureFixture[str]) -> None:
    data = wheel_bytes(regular("demo/__init__.py", b"A = 1\n"), regular("demo/broken.py", b"def (:\n"))
    with no_default_tmp(layer.parent):
        run_install(layer, (WHEEL, data), compile_pyc=True)
    compiled = os.listdir(layer / "demo" / "__pycache__")
    assert any(name.startswith("__init__.") and name.endswith(".pyc") for name in compiled), compiled
    assert not any(name.startswith("broken.") for name in compiled)  # a file that does not compile: left as it is
    assert mode_of(layer / "demo" / "__pycache__") == 0o755
    said = capfd.readouterr()
    assert (said.out, said.err) == ("", "")  # compileall's complaints never reach the gate's own output


def test_bytecode_is_compiled_in_a_hidden_staging_folder_beside_the_layer(layer: Path) -> None:
    run_install(layer, (WHEEL, wheel_bytes(regular("demo/__init__.py", b"A = 1\n"))), compile_pyc=True)
    [compiled] = (layer / "demo" / "__pycache__").iterdir()
    code = marshal.loads(compiled.read_bytes()[16:])  # the path it was compiled at: where the install was staged
    staged = Path(code.co_filename)
    assert staged.parent.parent.parent == layer.parent and staged.parent.parent.name.startswith(".unpack-")
    assert staged.relative_to(staged.parent.parent) == Path("demo", "__init__.py")


def test_compiling_runs_no_code_the_environment_names(layer: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    marker = tmp_path / "ran"
    (hook / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("PYTHONPATH", str(hook))  # isolated mode (-I): the compiling Python reads no PYTHON* variable
    run_install(layer, (WHEEL, wheel_bytes(regular("demo/__init__.py", b"A = 1\n"))), compile_pyc=True)
    assert (layer / "demo" / "__pycache__").is_dir()
    assert not marker.exists()


def test_without_compiling_no_bytecode_is_written(layer: Path) -> None:
    run_install(layer, (WHEEL, wheel_bytes(regular("demo/__init__.py", b"A = 1\n"))), compile_pyc=False)
    assert os.listdir(layer / "demo") == ["__init__.py"]


def test_tree_bytes_counts_files_under_the_folder_and_links_as_links(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "top.bin").write_bytes(b"t" * 10)
    (tmp_path / "a" / "mid.bin").write_bytes(b"m" * 20)
    (tmp_path / "a" / "b" / "low.bin").write_bytes(b"l" * 30)
    big = tmp_path.parent / f"{tmp_path.name}-big.bin"
    big.write_bytes(b"B" * 5000)
    (tmp_path / "a" / "link").symlink_to(big)
    assert tree_bytes(tmp_path) == 60 + len(str(big))
    assert tree_bytes(tmp_path / "a" / "b") == 30


# -- the cached wheel, hashed as it is read: open_verified


def test_open_verified_gives_the_bytes_it_hashed_as_a_private_copy_in_the_scratch_folder(
        tmp_path: Path) -> None:
    data = os.urandom(3 * CHUNK + 7)
    kept = tmp_path / "cache" / "d" / WHEEL
    kept.parent.mkdir(parents=True)
    kept.write_bytes(data)
    with no_default_tmp(tmp_path):
        copy = open_verified(kept, hashlib.sha256(data).hexdigest(), tmp_path / "cache")
    with copy:
        assert copy.read() == data
        where = os.readlink(f"/proc/self/fd/{copy.fileno()}")
        assert where.startswith(str(tmp_path / "cache") + "/") and where.endswith("(deleted)")
        kept.write_bytes(b"changed after it was read")  # what is unpacked is the copy
        copy.seek(0)
        assert copy.read() == data


def test_a_cached_wheel_whose_bytes_changed_is_refused_naming_both_hashes(tmp_path: Path) -> None:
    data = b"the wheel as kept"
    digest = hashlib.sha256(data).hexdigest()
    kept = tmp_path / "cache" / digest / WHEEL
    kept.parent.mkdir(parents=True)
    kept.write_bytes(data + b"!")
    now = hashlib.sha256(data + b"!").hexdigest()
    with pytest.raises(WheelRefused) as refused:
        open_verified(kept, digest, tmp_path)
    assert str(refused.value) == (
        f"the cached wheel {kept} has changed on disk (its sha256 is now {now}, kept as {digest}): nothing was "
        "installed; remove it (an install fetches it again) and find out what wrote the wheel cache")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == (WHEEL, "changed", now)


def test_a_cached_wheel_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    data = b"the wheel"
    digest = hashlib.sha256(data).hexdigest()
    real = tmp_path / "real.whl"
    real.write_bytes(data)
    kept = tmp_path / "cache" / digest / WHEEL
    kept.parent.mkdir(parents=True)
    kept.symlink_to(real)
    with pytest.raises(PackageRefused) as refused:
        open_verified(kept, digest, tmp_path)
    assert str(refused.value) == (
        f"the wheel {WHEEL} (sha256 {digest}) is not in the wheel cache {tmp_path / 'cache'} (Too many levels of "
        "symbolic links): replay it on the host that recorded the run")
    assert not isinstance(refused.value, WheelRefused)


def test_a_cached_wheel_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    kept = tmp_path / "cache" / "d" / WHEEL
    kept.mkdir(parents=True)
    descriptors = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(WheelRefused) as refused:  # a folder: refused as such (it was an IsADirectoryError)
        open_verified(kept, "0" * 64, tmp_path)
    assert sorted(os.listdir("/proc/self/fd")) == descriptors  # and its descriptor is closed
    assert str(refused.value) == (f"the cached wheel {kept} is not a regular file: nothing was installed; remove it "
                                  "and install again")
    assert (refused.value.wheel, refused.value.code, refused.value.value) == (WHEEL, "changed", "not a file")
    fifo = tmp_path / "cache" / "d" / "fifo.whl"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # held open: no open of the fifo can wait
    try:
        with pytest.raises(WheelRefused, match="is not a regular file"):
            open_verified(fifo, "0" * 64, tmp_path)
    finally:
        os.close(writer)


def test_a_missing_cached_wheel_says_where_it_was_looked_for(tmp_path: Path) -> None:
    kept = tmp_path / "cache" / "d" / WHEEL
    with pytest.raises(PackageRefused) as refused:
        open_verified(kept, "d" * 64, tmp_path)
    assert str(refused.value) == (f"the wheel {WHEEL} (sha256 {'d' * 64}) is not in the wheel cache "
                                  f"{tmp_path / 'cache'} (No such file or directory): replay it on the host that "
                                  "recorded the run")
