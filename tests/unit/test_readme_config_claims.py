"""README claims about configuration, each checked (README, "Configuration: cellgate.toml" and "Policy")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cellgate

from cellgate.gate._errors import ConfigError
from cellgate.gate.config import load_settings

TOOLS = '''
def refund(amount: float = {default}) -> str:
    """Refund an order."""
    return "refunded"
'''


@pytest.mark.parametrize("default", ["object()", "b'\\xff'", "float('nan')", "float('inf')"])
def test_a_python_default_json_cannot_write_is_a_config_error(tmp_path: Path, default: str) -> None:
    """README: "a tool whose Python default cannot be written in JSON is a configuration error" (the gate fills
    defaults in before the policy sees a call; NaN and the infinities are no JSON either)."""
    (tmp_path / "tools.py").write_text(TOOLS.format(default=default).replace("float = object()", "object = object()")
                                       .replace("float = b", "bytes = b"))
    (tmp_path / "cellgate.toml").write_text('[tools]\nmodules = ["tools.py"]\n')
    done = cellgate("policy", "check", str(tmp_path / "cellgate.toml"))
    assert done.returncode == 2, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert f"tool 'refund' ({tmp_path / 'tools.py'}): the default of parameter 'amount'" in message, message
    assert "cannot be written in its JSON Schema" in message and "use a JSON value" in message
    assert "Traceback" not in done.stderr


def test_a_json_default_is_fine(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(TOOLS.format(default="12.5"))
    (tmp_path / "cellgate.toml").write_text('[tools]\nmodules = ["tools.py"]\n')
    done = cellgate("policy", "check", str(tmp_path / "cellgate.toml"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("memory_mb", "max_message_mb", "ok"), [(256, 128, True), (256, 129, False),
                                                                  (1024, 64, True), (200, 101, False)])
def test_max_message_mb_is_at_most_half_of_memory_mb(tmp_path: Path, memory_mb: int, max_message_mb: int,
                                                     ok: bool) -> None:
    """README: `max_message_mb` ... (at most memory_mb / 2)."""
    path = tmp_path / "cellgate.toml"
    path.write_text(f"[sandbox]\nmemory_mb = {memory_mb}\nmax_message_mb = {max_message_mb}\n")
    if ok:
        assert load_settings(path).sandbox.max_message_mb == max_message_mb
        return
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    message = str(raised.value)
    assert str(path) in message
    assert f"max_message_mb = {max_message_mb} must be at most half of memory_mb = {memory_mb}" in message
