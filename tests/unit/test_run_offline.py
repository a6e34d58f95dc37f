"""`cellgate run` refuses before anything starts (issue 29, item 7): no API key is one line saying what to set
and how to try it offline; a bad `--scripted` file is one line naming the turn. Nothing is started: no run
folder, no notebook, no sandbox. (The scripted run itself, in gVisor: tests/sandbox/test_run_scripted.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SAMPLE_TOOLS

from cellgate.extensions.anthropic.scripted import read_script
from cellgate.gate import ConfigError

NO_CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_IDENTITY_TOKEN",
                  "ANTHROPIC_IDENTITY_TOKEN_FILE", "ANTHROPIC_FEDERATION_RULE_ID")


@pytest.fixture()
def keyless(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """An environment with no Anthropic credential the SDK could find (nor a profile on disk), and a run root
    that does not exist yet: a session that started would make it."""
    for name in NO_CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    (tmp_path / "home").mkdir()
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
            "CELLGATE_RUN_ROOT": str(tmp_path / "root")}


def test_without_an_api_key_run_says_what_to_set_in_one_line_and_starts_nothing(cli, keyless: dict[str, str],
                                                                                 tmp_path: Path) -> None:
    notebook = tmp_path / "run.ipynb"
    done = cli("run", "count the late orders", "--tools", str(SAMPLE_TOOLS), "--notebook", str(notebook),
               env=keyless, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: cellgate run needs an Anthropic API key: set ANTHROPIC_API_KEY")
    assert "--scripted FILE (examples/northwind/scripted.toml)" in done.stderr
    assert not notebook.exists() and not Path(keyless["CELLGATE_RUN_ROOT"]).exists()
    # A profile the SDK cannot load is the same one line, with the SDK's reason.
    (tmp_path / "anthropic").mkdir()
    done = cli("run", "count the late orders", "--tools", str(SAMPLE_TOOLS), "--notebook", str(notebook),
               env={**keyless, "ANTHROPIC_CONFIG_DIR": str(tmp_path / "anthropic")}, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "set ANTHROPIC_API_KEY" in done.stderr and "(the SDK said: Config file not found at" in done.stderr
    assert not notebook.exists() and not Path(keyless["CELLGATE_RUN_ROOT"]).exists()


@pytest.mark.parametrize(("script", "said"), [
    ('[[turn]]\ncod = "print(1)"\n', "[[turn]] 1: unknown key 'cod' (a [[turn]] has text, code or both)"),
    ('[[turn]]\ntext = "hi"\n[[turn]]\n', "[[turn]] 2: give text, code or both"),
    ('[[turn]]\ntext = 3\n', "[[turn]] 1 text: Input should be a valid string"),
    ('title = "x"\n', "the file has no [[turn]]; the file: unknown key 'title'"),
    ('[[turn]]\ncode = "print(1)"\n', "the last [[turn]] has code; end with a turn of text only"),
    ("[[turn\n", "is not valid TOML"),
])
def test_a_bad_script_is_one_line_naming_the_turn_and_starts_nothing(cli, keyless: dict[str, str], tmp_path: Path,
                                                                     script: str, said: str) -> None:
    path = tmp_path / "scripted.toml"
    path.write_text(script)
    done = cli("run", "task", "--scripted", str(path), "--tools", str(SAMPLE_TOOLS),
               "--notebook", str(tmp_path / "run.ipynb"), env=keyless, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: --scripted {str(path)!r}") and said in done.stderr, done.stderr
    assert not (tmp_path / "run.ipynb").exists() and not Path(keyless["CELLGATE_RUN_ROOT"]).exists()
    with pytest.raises(ConfigError, match="no-such.toml': cannot read it"):
        read_script(tmp_path / "no-such.toml")


def test_a_script_is_the_model_s_turns_each_a_program_or_words_or_both(tmp_path: Path) -> None:
    path = tmp_path / "scripted.toml"
    path.write_text('[[turn]]\ntext = "Counting."\ncode = "print(6 * 7)"\n[[turn]]\ncode = "x = 1"\n'
                    '[[turn]]\ntext = "42."\n')
    assert read_script(path) == [
        {"content": [{"type": "text", "text": "Counting."},
                     {"type": "tool_use", "id": "toolu_scripted_1", "name": "execute_python",
                      "input": {"code": "print(6 * 7)"}}], "stop_reason": "tool_use"},
        {"content": [{"type": "tool_use", "id": "toolu_scripted_2", "name": "execute_python",
                      "input": {"code": "x = 1"}}], "stop_reason": "tool_use"},
        {"content": [{"type": "text", "text": "42."}], "stop_reason": "end_turn"}]
