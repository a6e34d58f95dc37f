"""Snapshot starts: sandboxes of one configuration restored from one image of a started kernel."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT

from cellgate.gate.sandbox.local import snapshot
from cellgate.gate.sandbox.local.container import run_root

TOOLS = ROOT / "tests" / "tools"


def attached(box) -> dict:
    """How the session's current sandbox started, from the host's own journal."""
    path = box.session.notebook_path.with_name(box.session.notebook_path.stem + ".journal.jsonl")
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in events if e["event"] == "kernel-attached"][-1]["sandbox"]["start"]


def test_sandboxes_of_one_configuration_share_an_image_and_nothing_else(session_factory) -> None:
    first = session_factory(tools=[TOOLS / "sample_tools.py"], memory_mb=768)
    second = session_factory(tools=[TOOLS / "counted.py"], memory_mb=768)
    image = attached(second)["snapshot"]
    assert attached(first) == {"snapshot": image} and (run_root() / "images" / image).is_dir()
    assert first.execute("secret = 41\nprint(tools.add(secret))").stdout == "42\n"
    # Its own tools, its own variables, its own random numbers, its own key.
    probe = second.execute("import random\nprint(hasattr(tools, 'add'), hasattr(tools, 'charge'), 'secret' in dir())\n"
                           "print(random.random())")
    assert probe.stdout.splitlines()[0] == "False True False"
    assert first.execute("import random\nprint(random.random())").stdout.strip() != probe.stdout.splitlines()[1]
    assert first.session.km.session.key != second.session.km.session.key
    # Each restored sandbox has its own kernel key, never the frontend's (the relay re-signs between them).
    keys = [box.session.km.provisioner.handle.key for box in (first, second)]
    assert keys[0] != keys[1] and not {k.encode() for k in keys} & {first.session.km.session.key,
                                                                    second.session.km.session.key}


def test_the_image_follows_the_configuration(session_factory) -> None:
    small = session_factory(memory_mb=640)
    large = session_factory(memory_mb=1536)
    assert attached(small)["snapshot"] != attached(large)["snapshot"]
    # What a restored sandbox keeps from its image (here the cgroup and RLIMIT_AS) is its own configuration's.
    hog = large.execute("x = bytearray(700 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint('held')")
    assert hog.stdout == "held\n"
    refused = small.execute("x = bytearray(700 << 20)")
    assert refused.error["ename"] == "MemoryError"


def test_a_damaged_image_costs_one_cold_start_and_is_rebuilt(session_factory) -> None:
    box = session_factory(memory_mb=704)
    image = run_root() / "images" / attached(box)["snapshot"]
    for part in image.iterdir():
        part.write_bytes(b"not a checkpoint")
    cold = session_factory(memory_mb=704)
    start = attached(cold)
    assert "cold" in start and "did not restore" in start["cold"]
    assert cold.execute("print(6 * 7)").stdout == "42\n"
    assert not image.exists()  # dropped, so the next start builds a fresh one
    again = session_factory(memory_mb=704)
    assert attached(again) == {"snapshot": image.name} and again.execute("print('ok')").stdout == "ok\n"


def test_snapshots_can_be_turned_off(session_factory) -> None:
    box = session_factory(snapshot=False)
    assert attached(box) == {"cold": "snapshots off"}
    assert box.execute("print('cold')").stdout == "cold\n"


def test_the_image_key_covers_code_and_configuration() -> None:
    spec = json.dumps({"linux": {"cgroupsPath": "/cellgate/cg-1"}, "mounts": [{"source": "/run/x/cg-1/etc"}]})
    other = spec.replace("cg-1", "cg-2")

    class Runsc:
        path = "/bin/sh"

        @staticmethod
        def describe() -> dict:
            return {"runsc_version": "1"}

    assert snapshot.image_key(spec, "/run/x/cg-1", Runsc) == snapshot.image_key(other, "/run/x/cg-2", Runsc)
    assert snapshot.image_key(spec.replace("etc", "tmp"), "/run/x/cg-1", Runsc) != snapshot.image_key(
        spec, "/run/x/cg-1", Runsc)
    assert len(snapshot.code_digest()) == 64


def test_images_are_built_once_and_the_least_recently_used_are_pruned(tmp_path: Path) -> None:
    built = []

    def build(target: Path) -> None:
        built.append(target.name)
        (target / "checkpoint.img").write_text("state")

    for key in ("a", "b", "c", "a"):
        assert (snapshot.ensure_image(tmp_path, key, build) / "checkpoint.img").read_text() == "state"
    assert len(built) == 3 and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial left
    os.utime(tmp_path / "b", (1, 1))  # the least recently used
    assert snapshot.prune(tmp_path, 2) == 1 and sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["a", "c"]

    def broken(target: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        snapshot.ensure_image(tmp_path, "d", broken)
    assert not (tmp_path / "d").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_build_left_half_done_by_a_dead_process_is_cleared(tmp_path: Path) -> None:
    (tmp_path / ".k.dead0001").mkdir()
    (tmp_path / ".k.dead0001" / "pages.img").write_text("half")
    snapshot.ensure_image(tmp_path, "k", lambda target: (target / "checkpoint.img").write_text("state"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k", "k.lock"]
