"""``Session.resume`` refuses a checkpoint with another policy or sandbox setting, not only other tools, and says
what the record expects (issue 43, suite item 1 and new-user item 7). Real gVisor checkpoints."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cellgate.gate import Session
from tests.conftest import SAMPLE_TOOLS

POLICY = '[policy]\ndefault = "allow"\nmax_calls_per_session = {calls}\n'


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("paused-setup")
    (folder / "cellgate.toml").write_text(POLICY.format(calls=100))

    async def pause() -> Path:
        async with Session(config=folder / "cellgate.toml", tools=[str(SAMPLE_TOOLS)], notebook=folder / "run.ipynb",
                           cwd=folder, memory_mb=512) as session:
            await session.execute("kept = 42")
            return await session.checkpoint(folder / "checkpoint")

    return asyncio.run(pause())


def refusal(paused: Path, config: Path, **options: object) -> str:
    with pytest.raises(Exception) as refused:
        asyncio.run(Session.resume(paused, **{"config": config, "tools": [str(SAMPLE_TOOLS)], "cwd": paused.parent,
                                              **options}).start())
    return str(refused.value)


def test_a_changed_policy_or_sandbox_setting_is_refused_naming_it_and_the_same_setup_resumes(
        paused: Path, tmp_path: Path) -> None:
    other = tmp_path / "cellgate.toml"
    other.write_text(POLICY.format(calls=5))
    said = refusal(paused, other, memory_mb=512)
    assert "was made with other policy (max_calls_per_session: 100 -> 5)" in said, said
    assert "resume it with the tools, policy and sandbox settings it was made with" in said, said

    said = refusal(paused, paused.parent / "cellgate.toml", memory_mb=1024)
    assert "was made with other sandbox (limits.memory_mb: 512 -> 1024)" in said, said

    said = refusal(paused, paused.parent / "cellgate.toml", memory_mb=512, tools=[])
    assert "was made with other tools (the record's: " in said and "; now: none" in said, said

    async def resume() -> str:
        async with Session.resume(paused, config=paused.parent / "cellgate.toml", tools=[str(SAMPLE_TOOLS)],
                                  cwd=paused.parent, memory_mb=512) as session:
            return (await session.execute("print(kept)")).stdout

    assert asyncio.run(resume()) == "42\n"  # refused for its setup, not for anything else
