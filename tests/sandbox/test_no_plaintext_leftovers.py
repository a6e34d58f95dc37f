"""No plaintext leftovers (issue 42, finding 5; SECURITY.md H13, "no secret in the record").

A fork's or a trial's checkpoint is made in the host's private run root and gone once its sessions are restored
(kept only when the caller named a folder for it), a pool's when the pool closes; a kept checkpoint holds the
gate's known secrets and the kernel's memory (its image) only encrypted with keys from the host key, in a folder
that is its user's alone, and the plaintext a resume unseals is gone once the kernel is restored.

Real gVisor sandboxes, real runsc checkpoints; every file left under the test's folder is read whole.
"""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from pathlib import Path

from cellgate.gate import Session
from cellgate.gate.sandbox.runtime_dir import run_root
from cellgate.gate.session import live
from cellgate.gate.session.pool import Pool
from tests.conftest import SAMPLE_TOOLS

SECRET = "tok-ann-s3cr3t-value"  # what sample_tools.issue_token(user="ann") marks secret
# The secret's bytes as a file could hold them: raw (UTF-8 and UTF-16, as the kernel's memory may), and
# base64-encoded (as a careless manifest would).
FORMS = [SECRET.encode(), SECRET.encode("utf-16-le"), base64.b64encode(SECRET.encode())]
CELL = "token = tools.issue_token(user='ann')['token']; print(len(token))"


def files_holding_the_secret(folder: Path) -> list[str]:
    """Every regular file under ``folder`` (links not followed) whose bytes hold a form of the secret."""
    found = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        for name in names:
            path = Path(root, name)
            if not stat.S_ISREG(path.lstat().st_mode):
                continue
            data = path.read_bytes()
            if any(form in data for form in FORMS):
                found.append(str(path.relative_to(folder)))
    return sorted(found)


def checkpoint_folders(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(live.MANIFEST))


def work_folders() -> set[str]:
    """The plaintext checkpoints of the host's private run root (a fork's, or a resume's unsealed image)."""
    folder = run_root() / "checkpoints"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def test_after_forks_a_trial_and_a_pause_no_file_holds_the_gates_secret_and_only_the_pause_is_kept(
        tmp_path: Path) -> None:
    paused = tmp_path / "paused"
    before = work_folders()

    async def scenario() -> None:
        session = await Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path).start()
        try:
            first = await session.execute(CELL)
            assert first.stdout == f"{len(SECRET)}\n", first
            assert SECRET in session.provisioner.gate.secrets.known()  # the gate knows it: the checkpoints must too
            forks = await session.fork(2)  # the default folder, beside the notebook
            try:
                for fork in forks:  # each fork's gate still scrubs what the parent's knew
                    shown = await fork.execute("print(token)")
                    assert shown.stdout.startswith("[secret") and SECRET not in shown.stdout, shown
            finally:
                await asyncio.gather(*(f.shutdown() for f in forks))
            trial = await session.trial("print(token)")
            assert trial.result.stdout.startswith("[secret"), trial.result
            await trial.discard()
            assert await session.checkpoint(paused) == paused
        finally:
            await session.shutdown()

    asyncio.run(scenario())
    assert checkpoint_folders(tmp_path) == ["paused/checkpoint.json"]  # the forks' and the trial's are gone
    assert stat.S_IMODE(paused.stat().st_mode) == 0o700
    assert stat.S_IMODE((paused / live.MANIFEST).stat().st_mode) == 0o600
    assert stat.S_IMODE((paused / live.IMAGE).stat().st_mode) == 0o700
    assert SECRET not in (paused / live.MANIFEST).read_text()
    assert files_holding_the_secret(tmp_path) == []  # the kernel's memory too: sealed
    assert work_folders() == before  # no plaintext left in the run root either

    async def resume() -> str:
        async with Session.resume(paused, tools=[str(SAMPLE_TOOLS)], cwd=tmp_path) as session:
            return (await session.execute("print('resumed', tools.issue_token(user='ann')['token'])")).stdout

    shown = asyncio.run(resume())  # the kept checkpoint still resumes, its gate knowing the secret again
    assert shown.startswith("resumed [secret") and SECRET not in shown
    assert files_holding_the_secret(tmp_path) == []
    assert work_folders() == before  # the image a resume unsealed went once the kernel was restored


def test_a_fork_checkpoint_in_a_folder_the_caller_named_is_kept_with_its_secrets_encrypted(tmp_path: Path) -> None:
    named = tmp_path / "asked-for"

    async def scenario() -> None:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            await session.execute(CELL + "; del token")
            forks = await session.fork(1, named)
            await asyncio.gather(*(f.shutdown() for f in forks))

    before = work_folders()
    asyncio.run(scenario())
    assert checkpoint_folders(tmp_path) == ["asked-for/checkpoint.json"]
    assert files_holding_the_secret(tmp_path) == [] and work_folders() == before  # sealed; the plaintext gone
    assert stat.S_IMODE(named.stat().st_mode) == 0o700
    assert SECRET not in (named / live.MANIFEST).read_text()
    assert live.read_checkpoint(named).secrets[SECRET].startswith("[secret")  # decrypted with this host's key


def test_a_pools_checkpoint_stays_while_it_starts_members_and_goes_when_it_closes(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        async with Session(tools=[str(SAMPLE_TOOLS)], notebook=tmp_path / "run.ipynb", cwd=tmp_path) as session:
            await session.execute(CELL)
            pool = await Pool.from_session(session, 1)
            try:
                first = await pool.acquire()  # its replacement starts from the same checkpoint
                await pool.release(first)
                second = await pool.acquire()
                assert (await second.execute("print(token)")).stdout.startswith("[secret")
                await pool.release(second)
                while_open = work_folders() - before
            finally:
                await pool.close()
            return while_open

    before = work_folders()
    while_open = asyncio.run(scenario())
    assert len(while_open) == 1  # in the run root, never beside the record
    assert checkpoint_folders(tmp_path) == [] and work_folders() == before
    assert files_holding_the_secret(tmp_path) == []
