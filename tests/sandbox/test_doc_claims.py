"""Claims of docs/live-sessions.md that no test held (issue 43, suite item 8), with real gVisor sandboxes and
checkpoints:

- "cellgate saves the live kernel with gVisor's checkpoint (its variables, ..., its `/tmp`)" (line 4): a file a
  cell wrote to the sandbox's /tmp before the pause is there, whole, after ``Session.resume``, and in a fork.
- "What it does not keep: approvals (a resumed call asks again)" (line 33) and "no approval carries over"
  (line 57, a fork): the approver is asked for a call after the resume and in a fork, each time, for a request of
  its own (a new sequence number: never the id of an answer given before), though the same call was approved
  before the pause.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate import Session
from cellgate.gate.calls.approval import ApprovalRequest
from cellgate.gate.sandbox.images import build
from cellgate.gate.sandbox.images.spec import find_spec
from tests.conftest import SAMPLE_TOOLS, cellgate

WRITE_TMP = ("import hashlib, os\n"
             "data = os.urandom(1 << 20)\n"
             "open('/tmp/kept.bin', 'wb').write(data)\n"
             "print(hashlib.sha256(data).hexdigest())")
READ_TMP = "import hashlib\nprint(hashlib.sha256(open('/tmp/kept.bin', 'rb').read()).hexdigest())"
ECHO = "print(tools.echo(text='same words'))"


def config(folder: Path) -> Path:
    path = folder / "cellgate.toml"
    path.write_text(f"""
[tools]
modules = [{json.dumps(str(SAMPLE_TOOLS))}]
[policy]
default = "allow"
[policy.tools.echo]
decision = "approve"
""")
    return path


class Approver:
    """Approves every call, keeping each request it was asked."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> bool:
        self.asked.append(request)
        return True


def test_tmp_survives_a_pause_and_a_fork_and_no_approval_carries_over(tmp_path: Path) -> None:
    before, after = Approver(), Approver()
    checkpoint = tmp_path / "run.checkpoint"

    async def paused() -> tuple[str, str]:
        async with Session(config=config(tmp_path), notebook=tmp_path / "run.ipynb", cwd=tmp_path,
                           approver=before) as session:
            digest = (await session.execute(WRITE_TMP)).stdout.strip()
            echoed = await session.execute(ECHO)
            await session.checkpoint(checkpoint)
            return digest, echoed.stdout

    async def resumed() -> dict[str, Any]:
        async with Session.resume(checkpoint, config=config(tmp_path), cwd=tmp_path, approver=after) as session:
            seen: dict[str, Any] = {"tmp": (await session.execute(READ_TMP)).stdout.strip(),
                    "echo": (await session.execute(ECHO)).stdout}
            forks = await session.fork(1)
            try:
                seen["fork tmp"] = (await forks[0].execute(READ_TMP)).stdout.strip()
                seen["fork echo"] = (await forks[0].execute(ECHO)).stdout
                seen["fork notebook"] = forks[0].notebook_path
            finally:
                await asyncio.gather(*(f.shutdown() for f in forks))
            return seen

    digest, echoed = asyncio.run(paused())
    assert len(digest) == 64 and echoed == "same words\n"
    assert [r.tool for r in before.asked] == ["echo"]
    seen = asyncio.run(resumed())
    assert (seen["tmp"], seen["fork tmp"]) == (digest, digest)  # /tmp came back whole, in the resumed kernel and a fork
    assert (seen["echo"], seen["fork echo"]) == ("same words\n", "same words\n")
    # the resumed session and the fork each asked again, for the same tool and arguments as the approved call
    assert [r.tool for r in after.asked] == ["echo", "echo"], after.asked
    assert {r.args_sha256 for r in after.asked} == {before.asked[0].args_sha256}
    ids = [before.asked[0].id, *(r.id for r in after.asked)]
    assert len(set(ids)) == 3, ids  # no request is one an answer was already given for
    for notebook in (tmp_path / "run.ipynb", seen["fork notebook"]):
        checked = cellgate("verify", str(notebook))
        assert checked.returncode == 0, checked.stdout + checked.stderr


# docs/sandbox-images.md:76-85: "`preload`: modules the kernel imports before the snapshot every sandbox of the image
# is restored from, so that a cell importing them finds them loaded"; "`warm_completion`: jedi parses the builtins
# and typing stubs before the snapshot". An image of the minimal set with both is built into a store of the test's
# own; its first cell finds the modules loaded and parso's cache filled, where the minimal image's finds neither.
PRELOADED = ("wave", "xml.dom.minidom")
FIRST_CELL = ("import sys\n"
              f"print(sorted(m for m in {PRELOADED!r} if m in sys.modules))\n"
              "import parso.cache\n"
              "print(len(parso.cache.parser_cache) > 0)")


def first_cell(folder: Path, image: str) -> list[str]:
    (folder / "cellgate.toml").write_text(f'[sandbox]\nimage = "{image}"\n')

    async def run() -> list[str]:
        async with Session(config=folder / "cellgate.toml", notebook=folder / f"{image}.ipynb", cwd=folder) as s:
            return str((await s.execute(FIRST_CELL)).stdout).splitlines()
    return asyncio.run(run())


def test_an_images_preload_and_warm_completion_are_in_the_snapshot_a_session_starts_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert first_cell(tmp_path, "minimal") == ["[]", "False"]  # the control: the minimal image preloads neither
    monkeypatch.setenv("CELLGATE_IMAGE_STORE", str(tmp_path / "store"))
    spec = tmp_path / "cellgate-image.toml"
    spec.write_text(f"[images.warm]\npreload = {json.dumps(list(PRELOADED))}\nwarm_completion = true\n")
    image, built = build.build(find_spec("warm", spec))
    assert built and image.preload == PRELOADED and image.warm_completion
    assert first_cell(tmp_path, "warm") == [repr(sorted(PRELOADED)), "True"]
