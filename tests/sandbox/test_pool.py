"""The warm pool: sessions ready ahead, each handed out once, a cap with a clear error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from conftest import SAMPLE_TOOLS

from cellgate.gate import Pool, PoolExhausted


def test_pool_hands_out_warm_sessions_once_and_caps_them(tmp_path: Path, runsc: object) -> None:
    async def scenario() -> None:
        async with Pool(2, max_sessions=3, acquire_timeout=5, tools=[SAMPLE_TOOLS], notebook_dir=tmp_path) as pool:
            await pool.wait_warm()
            warm = {s.provisioner.handle.id for s in pool.warm}
            first = await pool.acquire()
            assert first.provisioner.handle.id in warm  # started ahead, not on demand
            second = await pool.acquire()
            assert first.provisioner.handle.id != second.provisioner.handle.id
            assert (await first.execute("secret = 'user one'\nprint(tools.echo('a'))")).stdout == "a\n"
            assert (await second.execute("print('secret' in globals())")).stdout == "False\n"
            third = await pool.acquire()  # the replacement started when `first` was taken
            with pytest.raises(PoolExhausted, match="at most 3 exist at once"):
                await pool.acquire()
            first_id = first.provisioner.handle.id
            await pool.release(first)
            fourth = await pool.acquire()  # a fresh one, never the released sandbox
            assert fourth.provisioner.handle.id not in (first_id, second.provisioner.handle.id)
            assert (await fourth.execute("print('secret' in globals())")).stdout == "False\n"
            for session in (second, third, fourth):
                await pool.release(session)

    asyncio.run(scenario())
