"""Security round 4 (issue 42, finding 1): nothing a cell leaves in its socket folder steers the host.

The socket folder is the one host folder the sandbox writes. A cell plants a symlink to a host file, a FIFO, a
folder or a hard link at every name the host and the kernel use there; then the session forks, tries cells and
keeps or discards them, checkpoints and resumes. The host file outside is unchanged (content, owner, mode), no
file outside the sandbox is given to the sandbox's uid, nothing hangs (each operation is bounded), and each
operation completes or fails with a clear error and the session goes on.

Real gVisor sandboxes, real runsc checkpoints and restores.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from cellgate.gate import Session, SessionError
from cellgate.gate._errors import FileRefused, SandboxError
from cellgate.gate.sandbox.environment import IPC_DIR, OUTPUT_LOG, SNAPSHOT_READY
from cellgate.gate.sandbox.local import oci
from cellgate.kernel import wire
from tests.conftest import SAMPLE_TOOLS

# Every name the host or the kernel uses in the socket folder.
NAMES = [wire.RESUME_MARKER, f".{wire.RESUME_MARKER}", wire.RESUMED_MARKER, wire.PAUSED_MARKER, OUTPUT_LOG,
         SNAPSHOT_READY]
OPERATION_WAIT = 120  # seconds: a bound on each operation, so a hang fails the test instead of holding it

PLANT = """
import os, shutil
folder, kind, target = {folder!r}, {kind!r}, {target!r}
if kind == "hardlink":
    source = os.path.join(folder, "planted-source")
    if not os.path.exists(source):
        with open(source, "w") as handle:
            handle.write("a file of the cell's")
for name in {names!r}:
    path = os.path.join(folder, name)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    if kind == "symlink":
        os.symlink(target, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        os.mkdir(path)
        open(os.path.join(path, "inside"), "w").close()
    else:
        os.link(source, path)
print(sorted(os.listdir(folder)))
"""

HOLD_A_SOCKET = """
import os, socket
held = socket.socket(socket.AF_UNIX)
held.bind(os.path.join({folder!r}, "held.sock"))
held.listen()
"""


class Sentinel:
    """A host file the planted links point at: it must end as it began."""

    def __init__(self, path: Path) -> None:
        path.write_text("the host's own file\n")
        os.chmod(path, 0o640)
        self.path = path
        self.before = self.state()

    def state(self) -> tuple[str, int, int, int]:
        info = os.lstat(self.path)
        return self.path.read_text(), info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def given_away(folder: Path) -> list[str]:
    """Files under ``folder`` owned by the sandbox's uid (the host gave nothing there to the sandbox)."""
    return [str(p) for p in folder.rglob("*") if os.lstat(p).st_uid == oci.SANDBOX_UID]


async def bounded(operation: Any) -> Any:
    return await asyncio.wait_for(operation, OPERATION_WAIT)


async def plant(session: Session, kind: str, target: Path) -> None:
    planted = await bounded(session.execute(PLANT.format(folder=IPC_DIR, kind=kind, target=str(target),
                                                         names=NAMES)))
    assert planted.error is None, planted
    assert all(name in planted.stdout for name in NAMES), planted.stdout


async def still_serves(session: Session) -> None:
    answer = await bounded(session.execute("print(tools.add(a=2, b=3))"))
    assert answer.stdout == "5\n", answer


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder", "hardlink"])
def test_names_a_cell_plants_in_its_socket_folder_do_not_steer_the_host(tmp_path: Path, kind: str) -> None:
    sentinel = Sentinel(tmp_path / "host-file")
    failures: list[str] = []

    async def attempt(session: Session, operation: Any) -> Any:
        """Run an operation the planted names are in the way of: it completes, or fails with a clear error."""
        try:
            return await bounded(operation)
        except (SessionError, SandboxError) as exc:
            failures.append(str(exc))
            return None

    async def scenario() -> None:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            await session.execute("kept = 41")
            await plant(session, kind, sentinel.path)
            forks = await attempt(session, session.fork(1))
            for fork in forks or ():
                assert (await bounded(fork.execute("print(kept + 1)"))).stdout == "42\n"
                await bounded(fork.shutdown())
            await still_serves(session)

            await plant(session, kind, sentinel.path)
            trial = await attempt(session, session.trial("kept = kept + 1"))
            if trial is not None:
                await bounded(trial.discard())
            await still_serves(session)

            await plant(session, kind, sentinel.path)
            trial = await attempt(session, session.trial("kept = kept + 1"))
            if trial is not None:
                await bounded(trial.keep())
            await still_serves(session)

            # Files in and out: the kernel moves them, inside the sandbox, where a link to a host path reaches
            # nothing of the host's.
            await bounded(session.execute(f"import os; os.symlink({str(sentinel.path)!r}, '/tmp/planted')"))
            for move in (session.upload("/tmp/planted", b"the cell's bytes"), session.download("/tmp/planted")):
                try:
                    await bounded(move)
                except FileRefused as exc:
                    assert "/tmp/planted" in str(exc), exc
            await still_serves(session)

            # A failed checkpoint: a socket the cell binds in the folder is one gVisor cannot save. The host tells
            # the kernel to take up its sockets again through the planted names; gVisor may have ended the
            # sandbox with the failed save, and then the error says so and the session is restarted.
            await plant(session, kind, sentinel.path)
            await bounded(session.execute(HOLD_A_SOCKET.format(folder=IPC_DIR)))
            with pytest.raises(SandboxError, match="runsc checkpoint failed") as failed:
                await bounded(session.checkpoint(tmp_path / "refused"))
            assert session.dead == ("its kernel is gone, restart the session" in str(failed.value)), failed.value
            if session.dead:
                await bounded(session.restart())
            await still_serves(session)
            assert not (tmp_path / "refused").exists()

            await plant(session, kind, sentinel.path)
            checkpoint = await attempt(session, session.checkpoint(tmp_path / "paused"))
            if checkpoint is None:
                await still_serves(session)
        if checkpoint is not None:
            async with Session.resume(checkpoint, tools=[str(SAMPLE_TOOLS)], cwd=tmp_path) as resumed:
                await still_serves(resumed)

    asyncio.run(scenario())
    assert sentinel.state() == sentinel.before
    assert given_away(tmp_path) == []
    assert failures == []  # every operation completed
