"""``[packages] allow`` decides every distribution an install resolves, not only what the cell asked for
(issue 43, suite item 2): a dependency outside the allowlist, a version outside an entry's range, and wheels
over ``max_mb`` each refuse the whole install, and nothing reaches the layer or the wheel cache.

The installs are real: ``PackageInstaller.install`` runs pip (``pip download --only-binary=:all:``) against a
local index of wheels built here (``PIP_NO_INDEX`` + ``PIP_FIND_LINKS``), each declaring its dependencies with
``Requires-Dist`` in its METADATA, as pip reads them.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from cellgate.gate.calls.packages import PackageInstaller, PackageRefused

MB = 1 << 20


def build_wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = (), padding: int = 0) -> Path:
    """``name-version-py3-none-any.whl`` in ``index``: a module, METADATA with its ``Requires-Dist`` lines, WHEEL,
    and ``padding`` bytes of random data stored uncompressed (the wheel's size on disk)."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    members = {f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
               f"{info}/METADATA": metadata.encode(),
               f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
               f"{info}/RECORD": b""}
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for member, content in members.items():
            archive.writestr(member, content)
        if padding:
            archive.writestr(f"{name}/padding.bin", os.urandom(padding), compress_type=zipfile.ZIP_STORED)
    path = index / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(data.getvalue())
    return path


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local index pip is pointed at, and only at (no network is asked)."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return folder


def installer(tmp_path: Path, allow: list[str], max_bytes: int = 16 * MB) -> PackageInstaller:
    layer = tmp_path / "layer"
    layer.mkdir(exist_ok=True)
    return PackageInstaller(layer, [], allow, max_bytes, cache=tmp_path / "cache")


def nothing_installed(packages: PackageInstaller) -> None:
    assert list(packages.layer.iterdir()) == []
    assert not packages.cache.exists() or list(packages.cache.iterdir()) == []
    assert packages.installed == []


def test_an_allowed_dependency_within_its_range_is_installed_with_what_was_asked_for(
        tmp_path: Path, index: Path) -> None:
    build_wheel(index, "top", "1.0", requires=("dep>=2",))
    build_wheel(index, "dep", "2.1")
    packages = installer(tmp_path, ["top", "dep>=2,<3"])
    result = packages.install(["top"])
    assert sorted((e["name"], e["version"]) for e in result["installed"]) == [("dep", "2.1"), ("top", "1.0")]
    assert (packages.layer / "top" / "__init__.py").is_file() and (packages.layer / "dep" / "__init__.py").is_file()


def test_a_dependency_outside_the_allowlist_refuses_the_whole_install(tmp_path: Path, index: Path) -> None:
    build_wheel(index, "top", "1.0", requires=("dep",))
    build_wheel(index, "dep", "1.0")
    packages = installer(tmp_path, ["top"])
    with pytest.raises(PackageRefused) as refused:
        packages.install(["top"])
    assert str(refused.value) == (
        "dep is not allowed by [packages] allow (allowed: top); add it there to let sessions install it (it is a "
        "dependency of what was asked for); nothing was installed")
    nothing_installed(packages)


def test_a_dependency_of_a_dependency_is_checked_too(tmp_path: Path, index: Path) -> None:
    build_wheel(index, "top", "1.0", requires=("middle",))
    build_wheel(index, "middle", "1.0", requires=("Deep_Dep",))
    build_wheel(index, "deep_dep", "1.0")
    packages = installer(tmp_path, ["top", "middle"])
    with pytest.raises(PackageRefused, match=r"^deep-dep is not allowed by \[packages\] allow .*a dependency of"):
        packages.install(["top"])
    nothing_installed(packages)


def test_a_version_outside_the_allowed_range_is_refused(tmp_path: Path, index: Path) -> None:
    build_wheel(index, "top", "1.0")
    packages = installer(tmp_path, ["top>=2"])
    for asked in ("top", "top==1.0"):
        with pytest.raises(PackageRefused) as refused:
            packages.install([asked])
        assert str(refused.value) == "top 1.0 is outside [packages] allow's top>=2: nothing was installed"
    nothing_installed(packages)


def test_a_dependency_outside_its_allowed_range_refuses_the_whole_install(tmp_path: Path, index: Path) -> None:
    build_wheel(index, "top", "1.0", requires=("dep",))
    build_wheel(index, "dep", "3.0")
    packages = installer(tmp_path, ["top", "dep<3"])
    with pytest.raises(PackageRefused) as refused:
        packages.install(["top"])
    assert str(refused.value) == "dep 3.0 is outside [packages] allow's dep<3: nothing was installed"
    nothing_installed(packages)


def test_wheels_over_max_mb_together_refuse_the_install_before_anything_is_kept(tmp_path: Path, index: Path) -> None:
    # each wheel alone is under the bound (1 MB); with its dependency, the install is over it
    build_wheel(index, "top", "1.0", requires=("dep",), padding=700 * 1024)
    build_wheel(index, "dep", "1.0", padding=700 * 1024)
    packages = installer(tmp_path, ["top", "dep"], max_bytes=MB)
    with pytest.raises(PackageRefused, match=r"^the wheels come to 1,4\d\d,\d\d\d bytes, over \[packages\] max_mb = 1 "
                                             r"\(1,048,576 bytes\): nothing was installed$"):
        packages.install(["top"])
    nothing_installed(packages)
    assert installer(tmp_path, ["top", "dep"], max_bytes=2 * MB).install(["top"])["installed"]  # under it: installed
