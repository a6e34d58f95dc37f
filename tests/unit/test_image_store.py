"""Image specs, the store and the record's image comparison, without building (tests/sandbox/test_images.py builds)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError, SandboxUnavailable
from cellgate.gate.ops.replay_trust import check_image, image_differences
from cellgate.gate.sandbox.images import build, store
from cellgate.gate.sandbox.images.spec import PROFILES, find_spec, load_specs
from cellgate.gate.sandbox.settings import SandboxSettings


def test_a_spec_file_defines_images_and_bad_entries_are_named(tmp_path: Path) -> None:
    good = tmp_path / "cellgate-image.toml"
    good.write_text('[images.geo]\ndebian = ["libgeos-c1v5"]\npython = ["shapely>=2", "pandas[parquet]==3.1.1"]\n')
    spec = find_spec("geo", good)
    assert spec.requirements()[-2:] == ["shapely>=2", "pandas[parquet]==3.1.1"]
    assert spec.debian_packages()[:2] == ["python3", "libstdc++6"]  # every image has its interpreter
    assert find_spec("data", good) == PROFILES["data"]
    for bad, says in [('python = ["https://example.invalid/x.whl"]', "is not a requirement"),
                      ('python = ["--index-url=x"]', "is not a requirement"),
                      ('python = ["pkg @ file:///etc"]', "is not a requirement"),
                      ('debian = ["Bad Name"]', "is not a Debian package name"),
                      ('pyhton = ["x"]', "unknown key 'pyhton'")]:
        good.write_text(f"[images.geo]\n{bad}\n")
        with pytest.raises(ConfigError, match=says) as raised:
            load_specs(good)
        assert str(good) in str(raised.value) and "images.geo" in str(raised.value)
    with pytest.raises(ConfigError, match=r"no image spec called 'nosuch' .* known: data, minimal"):
        find_spec("nosuch", None)


def test_sandbox_image_names_a_built_image_a_digest_or_host() -> None:
    assert SandboxSettings().image == "minimal"
    for fine in ("data", "host", "sha256:" + "a" * 64):
        assert SandboxSettings(image=fine).image == fine
    for wrong in ("../etc", "Data", "sha256:short", "/var/lib/cellgate/images/x"):
        with pytest.raises(ValueError, match="image"):
            SandboxSettings(image=wrong)


def make_tree(root: Path) -> None:
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3.11").write_bytes(b"\x7fELF")
    (root / "usr" / "bin" / "python3").symlink_to("python3.11")
    (root / "etc").mkdir()
    (root / "etc" / "x.conf").write_text("a = 1\n")


def test_the_tree_digest_changes_with_any_content_mode_name_or_link(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    make_tree(root)
    first, size = store.tree_digest(root)
    assert size == 4 + 6 and store.tree_digest(root)[0] == first  # stable
    changes = [
        lambda: (root / "etc" / "x.conf").write_text("a = 2\n"),
        lambda: os.chmod(root / "etc" / "x.conf", 0o755),
        lambda: (root / "etc" / "x.conf").rename(root / "etc" / "y.conf"),
        lambda: ((root / "usr" / "bin" / "python3").unlink(), (root / "usr" / "bin" / "python3").symlink_to("x")),
    ]
    seen = {first}
    for change in changes:
        change()
        digest = store.tree_digest(root)[0]
        assert digest not in seen
        seen.add(digest)


def fake_image(where: Path, name: str, packages: dict[str, str]) -> store.Image:
    """An image's folder as a build leaves it (its rootfs a stand-in), pointed at by ``name``."""
    rootfs = where / "staging" / "rootfs"
    make_tree(rootfs)
    digest, size = store.tree_digest(rootfs)
    folder = where / f"sha256-{digest}"
    (where / "staging").rename(folder)
    manifest = {"digest": digest, "spec": {"name": name}, "spec_key": "k-" + name, "python_version": "3.11",
                "kernel_slice_sha256": store.kernel_digest(),
                "python_packages": [{"name": n, "version": v, "sha256": "0" * 64} for n, v in packages.items()],
                "size_bytes": size, "built_at": "2026-12-04T00:00:00Z"}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    image = store.Image(folder, store.read_manifest(folder))
    store.point(where, name, image)
    return image


def test_the_store_finds_by_name_and_digest_and_gc_keeps_what_a_name_points_at(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELLGATE_IMAGE_STORE", str(tmp_path))
    image = fake_image(tmp_path, "mine", {"pandas": "3.1.1"})
    assert store.resolve("mine").digest == image.digest
    assert store.resolve(f"sha256:{image.digest}").folder == image.folder
    assert store.spec_key_image(tmp_path, "mine", "k-mine") is not None  # a second build would be a no-op
    assert store.spec_key_image(tmp_path, "mine", "another spec") is None
    with pytest.raises(SandboxUnavailable, match=r"image = 'other' is not built .* run `cellgate image build other`"):
        store.resolve("other")
    (tmp_path / "tmp" / "build-dead").mkdir(parents=True)  # what a crashed build left
    assert store.gc() == ["tmp/build-dead"]
    store.remove("mine")
    assert store.find("mine") is None and store.gc() == [image.folder.name]
    with pytest.raises(ConfigError, match="no image called 'mine'"):
        store.remove("mine")


def test_a_manifest_that_does_not_describe_its_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELLGATE_IMAGE_STORE", str(tmp_path))
    image = fake_image(tmp_path, "mine", {})
    manifest = json.loads((image.folder / "manifest.json").read_text())
    manifest["digest"] = "f" * 64
    (image.folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="does not describe the image"):
        store.resolve("mine")


def test_replay_compares_images_by_digest_and_names_the_packages_that_differ() -> None:
    recorded = {"name": "data", "digest": "a" * 64,
                "python_packages": [{"name": "pandas", "version": "3.1.1"}, {"name": "numpy", "version": "2.4.6"}]}
    assert image_differences(recorded, dict(recorded)) == []
    live = {"name": "data", "digest": "b" * 64,
            "python_packages": [{"name": "pandas", "version": "3.2.0"}, {"name": "numpy", "version": "2.4.6"}]}
    assert image_differences(recorded, live) == [
        f"the run was recorded in the image data sha256:{'a' * 16}…; this replay runs in data sha256:{'b' * 16}…",
        "Python packages that differ: pandas 3.1.1 -> 3.2.0"]
    with pytest.raises(ConfigError, match=r"--allow-other-image"):
        check_image(recorded, live, False, print)
    notes: list[str] = []
    check_image(recorded, live, True, notes.append)
    assert len(notes) == 2
    # A recording from before images (or a hostile one) is data, compared and never trusted.
    assert image_differences(None, live)[0].startswith("the run was recorded in the image host (recorded before images)")
    assert image_differences({"python_packages": "x" * 10}, live)


def test_pip_is_asked_for_wheels_of_the_images_python_and_platform_only() -> None:
    options = build.target_options("3.11", (2, 36))
    assert options[:2] == ["--only-binary=:all:", "--python-version"]
    assert "--abi" in options and options[options.index("--abi") + 1] == "cp311"
    platforms = [o.removeprefix("--platform=") for o in options if o.startswith("--platform=")]
    assert platforms[0].startswith("manylinux_2_36_") and any(p.startswith("manylinux_2_17_") for p in platforms)
    assert not any(p.startswith("manylinux_2_37_") for p in platforms)  # nothing newer than the image's glibc


def test_a_built_image_renders_a_kernel_build_context_with_the_same_locked_wheels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cellgate.gate.sandbox.images.dockerfile import write_context

    monkeypatch.setenv("CELLGATE_IMAGE_STORE", str(tmp_path / "store"))
    (tmp_path / "store").mkdir()
    image = fake_image(tmp_path / "store", "geo", {"shapely": "2.1.0", "pandas": "3.1.1"})
    manifest = {**image.manifest, "debian": {"suite": "bookworm", "packages": []},
                "spec": {"name": "geo", "debian": ["libgeos-c1v5"]}}
    kernel = image.rootfs / "usr/local/lib/python3.11/dist-packages/cellgate/kernel"
    kernel.mkdir(parents=True)
    (kernel / "__init__.py").write_text("")
    image = store.Image(image.folder, manifest)
    written = write_context(image, tmp_path / "context")
    dockerfile = written[0].read_text().splitlines()
    assert [line for line in dockerfile if line.startswith("FROM")] == ["FROM debian:bookworm-slim AS wheels",
                                                                        "FROM debian:bookworm-slim"]
    copied = [line.split()[-2] for line in dockerfile if line.startswith("COPY")]
    assert copied == ["requirements.lock", "/site", "cellgate/kernel"]  # the lock, the wheels, the kernel slice
    assert any("--require-hashes" in line and "--no-deps" in line for line in dockerfile)
    assert any("libgeos-c1v5" in line and "python-is-python3" in line for line in dockerfile)
    assert "USER 1000:1000" in dockerfile
    assert written[1].read_text() == (f"shapely==2.1.0 --hash=sha256:{'0' * 64}\n"
                                      f"pandas==3.1.1 --hash=sha256:{'0' * 64}\n")
    assert (tmp_path / "context" / "cellgate" / "kernel" / "__init__.py").is_file()
    with pytest.raises(FileExistsError, match="is not empty"):
        write_context(image, tmp_path / "context")
