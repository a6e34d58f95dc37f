"""``calls.packages`` without pip: the allowlist as the config gives it, the check of every resolved wheel (a
dependency too) against it, the wheel cache, the replay of a recorded install from the cache by sha256, and the
messages, which name the package and say what to do. The wheels are real zips built here; the installer is the
real one. Each exact assertion kills mutants of calls/packages.py that looser tests let through (scripts/mutation
packages; CONTRIBUTING, "Mutation testing"). What needs pip (``_download``, ``_pip``, the steps of ``install`` after
the requirements are checked) is in test_package_allowlist.py, against a local index."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import sys
import zipfile
from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.packages import TOOL_NAME, PackageInstaller, PackageRefused, parse_allow, wheel_cache
from cellgate.gate.calls.wheels import Limits, WheelRefused
from tests.unit.test_mutants_wheels import no_default_tmp

MB = 1 << 20
THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def wheel(folder: Path, name: str, version: str, files: dict[str, bytes] | None = None) -> Path:
    """``name-version-py3-none-any.whl`` in ``folder``, holding ``files`` (a module by default)."""
    members = files if files is not None else {f"{name.lower()}/__init__.py": f"VERSION = {version!r}\n".encode()}
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for member, content in members.items():
            info = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            archive.writestr(info, content)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(data.getvalue())
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def installer(tmp_path: Path, allow: list[str], max_bytes: int = 16 * MB, target: list[str] | None = None,
              max_unpacked_bytes: int | None = None) -> PackageInstaller:
    layer = tmp_path / "layer"
    layer.mkdir(parents=True, exist_ok=True)
    return PackageInstaller(layer, target or [], allow, max_bytes, cache=tmp_path / "cache",
                            max_unpacked_bytes=max_unpacked_bytes)


def kept(packages: PackageInstaller, source: Path) -> dict[str, str]:
    """``source`` kept in the cache as an install keeps it, and the entry its record names."""
    digest = sha256(source)
    packages.cache.mkdir(parents=True, exist_ok=True)
    packages._keep(source, digest)
    return {"name": source.name.split("-")[0], "version": source.name.split("-")[1], "sha256": digest,
            "file": source.name}


# -- where the cache is


def test_the_wheel_cache_is_the_configured_folder_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CELLGATE_WHEEL_CACHE", str(tmp_path / "wheels"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert wheel_cache() == tmp_path / "wheels"
    monkeypatch.setenv("CELLGATE_WHEEL_CACHE", "")  # set but empty: not configured
    assert wheel_cache() != Path("")


def test_the_wheel_cache_of_root_is_beside_the_image_store_and_of_a_user_in_their_data_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CELLGATE_WHEEL_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    def as_user() -> list[Path]:
        found = []
        for xdg in (str(tmp_path / "data"), "", None):  # set; empty (the default under HOME); unset
            if xdg is None:
                monkeypatch.delenv("XDG_DATA_HOME", raising=False)
            else:
                monkeypatch.setenv("XDG_DATA_HOME", xdg)
            found.append(wheel_cache())
        return found

    user = [tmp_path / "data" / "cellgate" / "wheels"] + 2 * [tmp_path / "home" / ".local" / "share" / "cellgate" /
                                                               "wheels"]
    if os.geteuid() != 0:
        assert as_user() == user
        return
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert wheel_cache() == Path("/var/lib/cellgate/wheels")
    os.seteuid(65534)  # the effective user alone: this process gets root back below
    try:
        found = as_user()
    finally:
        os.seteuid(0)
    assert found == user


# -- the allowlist as configured


def test_parse_allow_keys_each_requirement_by_its_canonical_name() -> None:
    allowed = parse_allow(["Humanize>=4,<5", "My_Pkg.Name", "tabulate==0.9.0"])
    assert {name: str(r) for name, r in allowed.items()} == {
        "humanize": "Humanize<5,>=4", "my-pkg-name": "My_Pkg.Name", "tabulate": "tabulate==0.9.0"}
    assert parse_allow([]) == {}


def test_a_malformed_allow_entry_is_a_config_error_naming_it_with_an_example() -> None:
    with pytest.raises(ConfigError) as error:
        parse_allow(["humanize", "not a requirement!"])
    assert str(error.value).startswith("[packages] allow: 'not a requirement!' is not a requirement (name, then "
                                       "versions: 'humanize>=4,<5'): ")
    assert len(str(error.value)) > len("[packages] allow: 'not a requirement!' is not a requirement (name, then "
                                       "versions: 'humanize>=4,<5'): ")  # packaging's own reason follows
    assert error.value.__cause__ is None and error.value.__suppress_context__


@pytest.mark.parametrize("entry", ["x @ https://example.invalid/x.whl", "x; python_version > '3'",
                                   "x>=1; os_name == 'posix'"])
def test_an_allow_entry_with_a_url_or_a_marker_is_a_config_error(entry: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_allow(["humanize", entry])
    assert str(error.value) == f"[packages] allow: {entry!r}: a name and versions only, no URL or marker"


def test_the_installer_takes_its_bounds_from_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = ["--python-version", "3.12"]
    packages = PackageInstaller(tmp_path / "layer", target, ["Humanize"], 3 * MB, cache=tmp_path / "c")
    target.append("--changed-afterwards")
    assert packages.target == ["--python-version", "3.12"] and packages.layer == tmp_path / "layer"
    assert list(packages.allowed) == ["humanize"] and packages.max_bytes == 3 * MB
    assert packages.limits == Limits(total_bytes=12 * MB, file_bytes=3 * MB)  # max_unpacked_mb: 4 x max_mb unset
    assert packages.cache == tmp_path / "c" and packages.installed == []
    explicit = PackageInstaller(tmp_path / "layer", [], [], 3 * MB, max_unpacked_bytes=5 * MB)
    assert explicit.limits == Limits(total_bytes=5 * MB, file_bytes=3 * MB)
    monkeypatch.setenv("CELLGATE_WHEEL_CACHE", str(tmp_path / "configured"))
    assert explicit.cache != tmp_path / "configured"  # read when the installer was made
    assert PackageInstaller(tmp_path / "layer", [], [], MB).cache == tmp_path / "configured"


def test_the_tool_is_pip_install_and_calls_the_installer(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["humanize"])
    tool = packages.tool()
    assert (tool.name, tool.source) == (TOOL_NAME, "cellgate: packages through the gate") == (
        "pip_install", "cellgate: packages through the gate")
    assert tool.description.startswith("Install Python packages (wheels only, each allowed by [packages] allow) "
                                       "into the sandbox.")
    assert list(tool.parameters["properties"]) == ["requirements"]
    with pytest.raises(PackageRefused, match=r"^six is not allowed by \[packages\] allow \(allowed: humanize\)"):
        tool.function(requirements=["six"])


# -- what a cell asks for, before pip runs


def test_an_install_of_nothing_is_refused_saying_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(PackageRefused) as refused:
        installer(tmp_path, ["humanize"]).install([])
    assert str(refused.value) == "name at least one package: %pip install NAME[==VERSION] ..."


@pytest.mark.parametrize("requirement, shown", [
    (5, "'5'"), (None, "'None'"), ("x @ file:///etc", "'x @ file:///etc'"), ("a" * 201, repr("a" * 200)),
    (["humanize"], repr("['humanize']")), ("", "''"),
])
def test_a_requirement_that_is_not_name_and_versions_is_refused_showing_it(
        tmp_path: Path, requirement: object, shown: str) -> None:
    packages = installer(tmp_path, ["humanize", "a" * 201])
    with pytest.raises(PackageRefused) as refused:
        packages.install(["humanize", requirement])  # type: ignore[list-item]
    assert str(refused.value) == (f"{shown} is not a requirement of the form NAME[==VERSION] (no URL, path or pip "
                                  "option: packages come from the host's index only)")
    assert not packages.cache.exists()


def test_a_requirement_of_200_characters_is_read_and_decided_by_the_allowlist(tmp_path: Path) -> None:
    name = "a" * 200
    with pytest.raises(PackageRefused) as refused:
        installer(tmp_path, ["humanize"]).install([name])
    assert str(refused.value) == (f"{name} is not allowed by [packages] allow (allowed: humanize); add it there to let "
                                  "sessions install it")


def test_every_asked_for_package_is_decided_before_pip_runs_by_its_canonical_name(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["tabulate", "Humanize>=4,<5"])
    with pytest.raises(PackageRefused) as refused:
        packages.install(["HUMANIZE==4.9.0", "tabulate", "Six>=1"])
    assert str(refused.value) == ("six is not allowed by [packages] allow (allowed: Humanize<5,>=4, tabulate); add "
                                  "it there to let sessions install it")
    assert not packages.cache.exists() and packages.installed == []


def test_with_nothing_allowed_the_refusal_says_so(tmp_path: Path) -> None:
    with pytest.raises(PackageRefused) as refused:
        installer(tmp_path, []).install(["humanize"])
    assert str(refused.value) == ("humanize is not allowed by [packages] allow (allowed: nothing); add it there to let "
                                  "sessions install it")


# -- every resolved wheel, a dependency too, against the allowlist: _check


def test_a_resolved_wheel_within_its_allowed_range_is_named_with_its_hash(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["My_Pkg>=1,<2", "other"])
    path = wheel(tmp_path / "dl", "my_pkg", "1.4.2")
    assert packages._check(path) == {"name": "my-pkg", "version": "1.4.2", "sha256": sha256(path),
                                     "file": "my_pkg-1.4.2-py3-none-any.whl"}


def test_a_prerelease_within_the_range_is_allowed(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["dep>=1,<3"])
    assert packages._check(wheel(tmp_path / "dl", "dep", "2.0rc1"))["version"] == "2.0rc1"


def test_a_resolved_dependency_outside_the_allowlist_refuses_the_install(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["top", "zeta"])
    with pytest.raises(PackageRefused) as refused:
        packages._check(wheel(tmp_path / "dl", "Deep_Dep", "1.0"))
    assert str(refused.value) == (
        "deep-dep is not allowed by [packages] allow (allowed: top, zeta); add it there to let sessions install it "
        "(it is a dependency of what was asked for); nothing was installed")


@pytest.mark.parametrize("allow, version, shown", [("dep<3", "3.0", "dep<3"), ("dep>=2", "1.9", "dep>=2"),
                                                   ("Dep==2.1", "2.1.1", "Dep==2.1"),
                                                   ("dep>=1,!=1.5", "1.5", "dep!=1.5,>=1")])
def test_a_resolved_version_outside_its_allowed_range_refuses_the_install(
        tmp_path: Path, allow: str, version: str, shown: str) -> None:
    packages = installer(tmp_path, [allow])
    with pytest.raises(PackageRefused) as refused:
        packages._check(wheel(tmp_path / "dl", "dep", version))
    assert str(refused.value) == f"dep {version} is outside [packages] allow's {shown}: nothing was installed"


@pytest.mark.parametrize("allow, version", [("dep<3", "2.99"), ("dep>=2", "2"), ("dep==2.1", "2.1.0"),
                                            ("dep", "0.0.1")])
def test_a_resolved_version_at_the_edge_of_its_range_is_allowed(tmp_path: Path, allow: str, version: str) -> None:
    packages = installer(tmp_path, [allow])
    assert packages._check(wheel(tmp_path / "dl", "dep", version))["version"] == version


# -- the wheel cache: _keep


def test_a_wheel_is_kept_by_its_sha256_whole_and_nothing_else_is_left(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["demo"])
    source = wheel(tmp_path / "dl", "demo", "1.0")
    digest = sha256(source)
    packages.cache.mkdir()
    cached = packages._keep(source, digest)
    assert cached == packages.cache / digest / source.name
    assert cached.read_bytes() == source.read_bytes() and not cached.is_symlink()
    assert os.listdir(packages.cache / digest) == [source.name]  # no .keep- file left


def test_a_wheel_is_written_in_its_cache_folder_even_if_that_folder_is_there_already(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["demo"])
    source = wheel(tmp_path / "dl", "demo", "1.0")
    digest = sha256(source)
    (packages.cache / digest).mkdir(parents=True)  # left by a keep that did not finish, say
    with no_default_tmp(tmp_path):  # written in the cache folder itself, then renamed: never across file systems
        cached = packages._keep(source, digest)
    assert cached.read_bytes() == source.read_bytes()
    assert os.listdir(packages.cache / digest) == [source.name]


def test_a_kept_wheel_stays_as_it_is(tmp_path: Path) -> None:
    packages = installer(tmp_path, ["demo"])
    source = wheel(tmp_path / "dl", "demo", "1.0")
    digest = sha256(source)
    (packages.cache / digest).mkdir(parents=True)
    (packages.cache / digest / source.name).write_bytes(b"what was kept")
    assert packages._keep(source, digest).read_bytes() == b"what was kept"  # checked by hash when it is read
    (packages.cache / digest / source.name).unlink()
    (packages.cache / digest / source.name).symlink_to(tmp_path / "nowhere")
    assert packages._keep(source, digest).is_symlink()  # a dangling link too: refused when it is opened
    assert os.listdir(packages.cache / digest) == [source.name]


# -- a replay: reinstall


def test_a_recorded_install_is_put_back_from_the_cache(tmp_path: Path) -> None:
    packages = installer(tmp_path, [])
    entries = [kept(packages, wheel(tmp_path / "dl", "alpha", "1.0")),
               kept(packages, wheel(tmp_path / "dl", "beta", "2.0", {"beta.py": b"B = 2\n"}))]
    with no_default_tmp(tmp_path):  # the verified copies are made in the wheel cache
        again = packages.reinstall({"installed": entries})
    assert again == entries and all(a is not b for a, b in zip(again, entries, strict=True))
    assert (packages.layer / "alpha" / "__init__.py").read_text() == "VERSION = '1.0'\n"
    assert (packages.layer / "beta.py").read_text() == "B = 2\n"
    assert packages.installed == []  # a replay puts back what the record says; it installs nothing new


def test_a_recorded_install_of_no_wheels_puts_back_nothing(tmp_path: Path) -> None:
    packages = installer(tmp_path, [])
    assert packages.reinstall({"installed": []}) == []
    assert list(packages.layer.iterdir()) == []


@pytest.mark.parametrize("result", [None, ["installed"], "installed", {"installed": "x.whl"}, {"installed": None},
                                    {"other": []}])
def test_a_recorded_result_that_names_no_wheels_is_refused(tmp_path: Path, result: object) -> None:
    with pytest.raises(PackageRefused) as refused:
        installer(tmp_path, []).reinstall(result)
    assert str(refused.value) == "the recorded pip_install result names no installed wheels"


@pytest.mark.parametrize("digest, file", [
    ("A" * 64, "x-1.0-py3-none-any.whl"), ("a" * 63, "x-1.0-py3-none-any.whl"), ("a" * 65, "x-1.0-py3-none-any.whl"),
    ("a" * 64 + "\n", "x.whl"), ("a" * 64, "x.zip"), ("a" * 64, "sub/x.whl"), ("a" * 64, "x.whl\n"),
    ("a" * 64, ".whl"), ("a" * 64, "x whl.whl"), ("", ""),
])
def test_a_recorded_wheel_this_host_could_not_have_kept_is_refused(tmp_path: Path, digest: str, file: str) -> None:
    with pytest.raises(PackageRefused) as refused:
        installer(tmp_path, []).reinstall({"installed": [{"sha256": digest, "file": file}]})
    assert str(refused.value) == (f"the recorded wheel {file[:100]!r} (sha256 {digest[:64]!r}) is not one this host "
                                  "could have kept")


def test_a_refused_recorded_wheel_is_shown_cut_short(tmp_path: Path) -> None:
    file, digest = "f" * 150 + "/.whl", "g" * 80
    with pytest.raises(PackageRefused) as refused:
        installer(tmp_path, []).reinstall({"installed": [{"sha256": digest, "file": file}]})
    assert str(refused.value) == (f"the recorded wheel {'f' * 100!r} (sha256 {'g' * 64!r}) is not one this host could "
                                  "have kept")
    with pytest.raises(PackageRefused, match=r"^the recorded wheel '' \(sha256 ''\)"):
        installer(tmp_path, []).reinstall({"installed": [{}]})


def test_names_of_every_allowed_character_are_read_from_the_cache(tmp_path: Path) -> None:
    packages = installer(tmp_path, [])
    source = wheel(tmp_path / "dl", "Odd.Name_x", "1.0+local", {"odd/x.py": b""})
    entry = kept(packages, source)
    assert packages.reinstall({"installed": [entry]}) == [entry]
    assert (packages.layer / "odd" / "x.py").is_file()


def test_a_recorded_wheel_missing_from_the_cache_refuses_the_replay(tmp_path: Path) -> None:
    packages = installer(tmp_path, [])
    entry = kept(packages, wheel(tmp_path / "dl", "alpha", "1.0"))
    gone = {"sha256": "e" * 64, "file": "beta-1.0-py3-none-any.whl"}
    with pytest.raises(PackageRefused) as refused:
        packages.reinstall({"installed": [entry, gone]})
    assert str(refused.value) == (f"the wheel beta-1.0-py3-none-any.whl (sha256 {'e' * 64}) is not in the wheel cache "
                                  f"{packages.cache} (No such file or directory): replay it on the host that recorded "
                                  "the run")
    assert list(packages.layer.iterdir()) == []  # nothing of the first wheel either


def test_a_recorded_wheel_changed_in_the_cache_refuses_the_replay(tmp_path: Path) -> None:
    packages = installer(tmp_path, [])
    entry = kept(packages, wheel(tmp_path / "dl", "alpha", "1.0"))
    path = packages.cache / entry["sha256"] / entry["file"]
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(WheelRefused) as refused:
        packages.reinstall({"installed": [entry]})
    assert refused.value.code == "changed" and refused.value.wheel == entry["file"]
    assert list(packages.layer.iterdir()) == []


def test_a_replay_is_held_to_the_sessions_bounds(tmp_path: Path) -> None:
    packages = installer(tmp_path, [], max_bytes=MB, max_unpacked_bytes=MB)
    entry = kept(packages, wheel(tmp_path / "dl", "big", "1.0", {"big/a.bin": b"a" * (MB // 2 + 1),
                                                                  "big/b.bin": b"b" * (MB // 2)}))
    with pytest.raises(WheelRefused) as refused:
        packages.reinstall({"installed": [entry]})
    assert refused.value.code == "max_unpacked_mb"
    per_file = installer(tmp_path / "other", [], max_bytes=MB // 2, max_unpacked_bytes=8 * MB)
    entry = kept(per_file, wheel(tmp_path / "dl2", "big", "1.0", {"big/a.bin": b"a" * (MB // 2 + 1)}))
    with pytest.raises(WheelRefused) as refused:
        per_file.reinstall({"installed": [entry]})
    assert refused.value.code == "max_mb"


# -- byte-compiling for the sandbox's Python


@pytest.mark.parametrize("target, compiles", [
    ([], True), (["--python-version", THIS_PYTHON], True), (["--python-version", "2.7"], False),
    (["--platform", "manylinux2014_x86_64", "--python-version", THIS_PYTHON, "--implementation", "cp"], True),
    (["--platform", "manylinux2014_x86_64", "--python-version", "3.99"], False),
    (["--python-version", f"{sys.version_info.major}{sys.version_info.minor}"], False),
    (["--platform", THIS_PYTHON], True),
])
def test_bytecode_is_compiled_only_for_a_sandbox_python_of_this_version(
        tmp_path: Path, target: list[str], compiles: bool) -> None:
    packages = installer(tmp_path, [], target=target)
    assert packages._compiles_for_this_python() is compiles
    entry = kept(packages, wheel(tmp_path / "dl", "alpha", "1.0"))
    packages.reinstall({"installed": [entry]})
    assert (packages.layer / "alpha" / "__pycache__").is_dir() is compiles


# -- with pip, against a local folder of wheels (no index, no network): _download, _pip and install's steps


def pip_wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A wheel pip can resolve: METADATA (with ``Requires-Dist``), WHEEL and a module."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    return wheel(index, name, version, {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(), f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/RECORD": b""})


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The only place pip looks: a folder (and a second find-links location that does not exist, whose warning
    pip prints and the refusals leave out)."""
    folder = tmp_path / "index"
    folder.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", f"{folder} {tmp_path / 'no-such-index'}")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return folder


def nothing_installed(packages: PackageInstaller) -> None:
    assert list(packages.layer.iterdir()) == [] and packages.installed == []
    assert not packages.cache.exists() or list(packages.cache.iterdir()) == []


NO_WHEEL = ("for the sandbox's Python and platform (a package with only a source distribution is never built: "
            "building runs its code on the host): ")


def test_installs_are_kept_by_hash_unpacked_and_named(tmp_path: Path, index: Path,
                                                      capfd: pytest.CaptureFixture[str]) -> None:
    top, dep = pip_wheel(index, "top", "1.0", requires=("dep",)), pip_wheel(index, "dep", "2.0")
    other = pip_wheel(index, "other", "3.0")
    cache = tmp_path / "not" / "yet" / "cache"
    packages = PackageInstaller(tmp_path / "layer", [], ["top", "dep", "other"], 16 * MB, cache=cache)
    (tmp_path / "layer").mkdir()
    first = packages.install(["top"])
    named = {"dep": {"name": "dep", "version": "2.0", "sha256": sha256(dep), "file": dep.name},
             "top": {"name": "top", "version": "1.0", "sha256": sha256(top), "file": top.name}}
    assert first == {"installed": [named["dep"], named["top"]]}
    second = packages.install(["other==3.0"])
    assert second == {"installed": [{"name": "other", "version": "3.0", "sha256": sha256(other), "file": other.name}]}
    assert packages.installed == first["installed"] + second["installed"]
    for path in (top, dep, other):
        assert (cache / sha256(path) / path.name).read_bytes() == path.read_bytes()
    assert sorted(p.name for p in packages.layer.iterdir() if not p.name.endswith(".dist-info")) == [
        "dep", "other", "top"]
    said = capfd.readouterr()
    assert (said.out, said.err) == ("", "")  # pip's output is the gate's to read, never printed


def test_wheels_of_exactly_max_mb_are_installed(tmp_path: Path, index: Path) -> None:
    wheels = [pip_wheel(index, "top", "1.0", requires=("dep",)), pip_wheel(index, "dep", "1.0")]
    exactly = sum(path.stat().st_size for path in wheels)
    assert len(installer(tmp_path, ["top", "dep"], max_bytes=exactly).install(["top"])["installed"]) == 2
    with pytest.raises(PackageRefused, match=fr"^the wheels come to {exactly:,} bytes, over \[packages\] max_mb = 0 "
                                             fr"\({exactly - 1:,} bytes\): nothing was installed$"):
        installer(tmp_path / "under", ["top", "dep"], max_bytes=exactly - 1).install(["top"])


def test_no_wheel_of_an_asked_for_version_is_refused_with_the_end_of_what_pip_said(
        tmp_path: Path, index: Path) -> None:
    for minor in range(100):  # pip names every version it found: more than the 500 characters the refusal keeps
        pip_wheel(index, "top", f"1.{minor}")
    pip_wheel(index, "other", "1.0")
    packages = installer(tmp_path, ["top", "other"])
    with pytest.raises(PackageRefused) as refused:
        packages.install(["other", "top==9.0"])
    message = str(refused.value)
    assert message.startswith("no wheel of other top==9.0 " + NO_WHEEL)
    said = message[len("no wheel of other top==9.0 " + NO_WHEEL):]
    assert len(said) == 500 and said.endswith("1.98, 1.99)\nERROR: No matching distribution found for top==9.0")
    assert "is ignored:" not in message
    nothing_installed(packages)


def test_a_package_with_only_a_source_distribution_is_never_built(tmp_path: Path, index: Path) -> None:
    (index / "onlysrc-1.0.tar.gz").write_bytes(b"an sdist: building it would run its setup.py on the host")
    packages = installer(tmp_path, ["onlysrc"])
    with pytest.raises(PackageRefused) as refused:
        packages.install(["onlysrc"])
    message = str(refused.value)
    assert message.startswith("no wheel of onlysrc " + NO_WHEEL + "ERROR: Could not find a version that satisfies the "
                              "requirement onlysrc (from versions: none)\nERROR: No matching distribution found for "
                              "onlysrc"), message
    nothing_installed(packages)


def test_requirements_pip_cannot_resolve_together_are_refused_with_what_pip_said(tmp_path: Path, index: Path) -> None:
    pip_wheel(index, "top", "1.0")
    pip_wheel(index, "top", "1.1")
    packages = installer(tmp_path, ["top"])
    with pytest.raises(PackageRefused) as refused:
        packages.install(["top==1.0", "top==1.1"])
    message = str(refused.value)
    assert message.startswith("pip could not resolve top==1.0 top==1.1: ERROR: Cannot install top==1.0 and top==1.1 "
                              "because these package versions have conflicting dependencies.\nERROR: "
                              "ResolutionImpossible"), message
    assert "is ignored:" not in message and not message.endswith("\n")
    nothing_installed(packages)
