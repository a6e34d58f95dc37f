"""``calls.packages`` on hostile and malformed input: refused before pip runs or anything is read from the cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.calls.packages import PackageInstaller, PackageRefused, parse_allow


@pytest.fixture
def installer(tmp_path: Path) -> PackageInstaller:
    (tmp_path / "layer").mkdir()
    return PackageInstaller(tmp_path / "layer", [], ["humanize>=4,<5"], 1 << 20, cache=tmp_path / "cache")


@pytest.mark.parametrize("requirement", ["https://example.invalid/x.whl", "--index-url=http://x", "x @ file:///etc",
                                         "../../etc/passwd", "humanize; os_name=='posix'", "a" * 300])
def test_a_requirement_that_is_not_name_and_versions_is_refused(installer: PackageInstaller, requirement: str) -> None:
    with pytest.raises(PackageRefused, match="is not a requirement"):
        installer.install([requirement])


def test_a_package_outside_the_allowlist_is_refused_before_pip_runs(installer: PackageInstaller) -> None:
    with pytest.raises(PackageRefused, match=r"six is not allowed by \[packages\] allow \(allowed: humanize<5,>=4\)"):
        installer.install(["humanize", "six"])
    assert not (installer.cache).exists()  # nothing was fetched


@pytest.mark.parametrize("entry, says", [
    ({"sha256": "../../../etc", "file": "x.whl"}, "is not one this host could have kept"),
    ({"sha256": "0" * 64, "file": "../x.whl"}, "is not one this host could have kept"),
    ({"sha256": "0" * 64, "file": "humanize-4.9.0-py3-none-any.whl"}, "is not in the wheel cache"),
])
def test_a_recorded_install_naming_what_the_cache_does_not_hold_is_refused(
        installer: PackageInstaller, entry: dict[str, str], says: str) -> None:
    with pytest.raises(PackageRefused, match=says):
        installer.reinstall({"installed": [entry]})
    with pytest.raises(PackageRefused, match="names no installed wheels"):
        installer.reinstall(["not", "a", "result"])


def test_a_cached_wheel_whose_bytes_changed_is_not_put_back(installer: PackageInstaller) -> None:
    data = b"a wheel's bytes"
    digest = hashlib.sha256(data).hexdigest()
    kept = installer.cache / digest / "humanize-4.9.0-py3-none-any.whl"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(data + b" altered")
    with pytest.raises(PackageRefused, match="has changed on disk"):
        installer.reinstall({"installed": [{"sha256": digest, "file": kept.name}]})


def test_the_allowlist_is_checked_when_the_config_is_read() -> None:
    assert set(parse_allow(["humanize>=4", "Tabulate"])) == {"humanize", "tabulate"}
    for bad in ["not a requirement!", "x @ https://example.invalid/x.whl"]:
        with pytest.raises(ConfigError, match=r"\[packages\] allow"):
            parse_allow([bad])
