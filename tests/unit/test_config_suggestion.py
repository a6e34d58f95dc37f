"""An unknown key in cellgate.toml suggests the nearest key its table has (issue 43, item 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cellgate.gate._errors import ConfigError
from cellgate.gate.config import load_settings


@pytest.mark.parametrize(("toml", "said"), [
    ("[sandbox]\nmemory = 512\n", "unknown key 'sandbox.memory': remove it or check its spelling; did you mean "
                                  "'memory_mb'?"),
    ("[polcy]\n", "unknown key 'polcy': remove it or check its spelling; did you mean 'policy'?"),
    ("[policy.tools.fetch]\ndecison = 'allow'\n", "unknown key 'policy.tools.fetch.decison': remove it or check its "
                                                  "spelling; did you mean 'decision'?"),  # through a table of tables
])
def test_an_unknown_key_suggests_the_nearest_known_one(tmp_path: Path, toml: str, said: str) -> None:
    (tmp_path / "cellgate.toml").write_text(toml)
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path / "cellgate.toml")
    assert said in str(refused.value)


def test_a_key_close_to_none_suggests_nothing(tmp_path: Path) -> None:
    (tmp_path / "cellgate.toml").write_text("[sandbox]\nzzzzqqq = 1\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path / "cellgate.toml")
    assert str(refused.value).endswith("unknown key 'sandbox.zzzzqqq': remove it or check its spelling")
