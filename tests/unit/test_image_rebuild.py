"""docs/sandbox-images.md:39-41 (issue 43, suite item 8): "A build is skipped when the image of that name was built
from the same spec, the same apt sources and Debian release, the same kernel slice and architecture (`--force`
builds it again)."

``build.spec_key`` is what a build is skipped by: it must change with the spec, the apt sources' content and the
architecture (the release and the kernel slice are read from this machine and this cellgate, which a test does
not change). ``build.build`` then skips a build whose key the store's name points at, and ``force`` does not: with
no mmdebstrap on the PATH, a build that was not skipped says so, so no image is built here.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from cellgate.gate._errors import SandboxUnavailable
from cellgate.gate.sandbox.images import build, store
from cellgate.gate.sandbox.images.spec import find_spec
from tests.unit.test_image_store import fake_image


def spec_file(folder: Path, python: str) -> Path:
    path = folder / "cellgate-image.toml"
    path.write_text(f'[images.mine]\ndebian = ["fontconfig"]\npython = ["{python}"]\n')
    return path


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The apt source file the key reads (the module's list of where apt's sources are, pointed at one of ours)."""
    path = tmp_path / "sources.list"
    path.write_text("deb http://apt.invalid/debian bookworm main\n")
    monkeypatch.setattr(build, "APT_SOURCES", (str(path),))
    return path


def test_the_key_a_build_is_skipped_by_changes_with_the_spec_the_sources_and_the_architecture(
        tmp_path: Path, sources: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = find_spec("mine", spec_file(tmp_path, "humanize==4.9.0"))
    first = build.spec_key(spec)
    assert build.spec_key(find_spec("mine", spec_file(tmp_path, "humanize==4.9.0"))) == first  # the same: skipped
    keys = {first}
    changed = build.spec_key(find_spec("mine", spec_file(tmp_path, "humanize==4.10.0")))
    keys.add(changed)
    spec = find_spec("mine", spec_file(tmp_path, "humanize==4.9.0"))
    sources.write_text("deb http://mirror.example/debian bookworm main\n")
    keys.add(build.spec_key(spec))
    sources.write_text("deb http://apt.invalid/debian bookworm main\n")
    assert build.spec_key(spec) == first
    monkeypatch.setattr(platform, "machine", lambda: "riscv64" if platform.uname().machine != "riscv64" else "x86_64")
    keys.add(build.spec_key(spec))
    assert len(keys) == 4, keys


def test_a_build_of_a_built_spec_is_skipped_and_force_builds_it_again(
        tmp_path: Path, sources: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "store"
    own.mkdir()
    monkeypatch.setenv("CELLGATE_IMAGE_STORE", str(own))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # a build that is not skipped stops at mmdebstrap
    spec = find_spec("mine", spec_file(tmp_path, "humanize==4.9.0"))
    image = fake_image(own, "mine", {"humanize": "4.9.0"})
    store.point(own, "mine", store.Image(image.folder, {**image.manifest, "spec_key": build.spec_key(spec)}))
    found, built = build.build(spec)
    assert (found.folder, built) == (image.folder, False)
    with pytest.raises(SandboxUnavailable, match="mmdebstrap is not installed"):
        build.build(spec, force=True)
    with pytest.raises(SandboxUnavailable, match="mmdebstrap is not installed"):  # another spec: not skipped
        build.build(find_spec("mine", spec_file(tmp_path, "humanize==4.10.0")))
