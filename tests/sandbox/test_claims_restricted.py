"""README claim (issue 21): in restricted mode, imports are limited to a default set plus `[sandbox]
allowed_imports`; a module outside the set is refused, and importable once listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cellgate.gate.testing import BlockingSession
from cellgate.kernel.restricted import DEFAULT_IMPORTS

pytestmark = pytest.mark.gvisor

SAMPLE = Path(__file__).resolve().parent.parent / "tools" / "sample_tools.py"
PROGRAM = ("import string\nfrom string import ascii_lowercase\n"
           "print(string.capwords('ada lovelace'), ascii_lowercase[:3])")



def restricted_session(folder: Path, allowed: list[str]) -> BlockingSession:
    folder.mkdir()
    config = folder / "cellgate.toml"
    config.write_text(f"[tools]\nmodules = [{json.dumps(str(SAMPLE))}]\n"
                      f"[sandbox]\nrestricted = true\nallowed_imports = {json.dumps(allowed)}\n")
    return BlockingSession(config=config, notebook=folder / "run.ipynb", cwd=folder)


def test_a_module_outside_the_default_set_is_refused_until_listed_in_allowed_imports(tmp_path: Path,
                                                                                     runsc: object) -> None:
    assert "string" not in DEFAULT_IMPORTS and "zlib" not in DEFAULT_IMPORTS
    with restricted_session(tmp_path / "default", []) as box:
        refused = box.execute(PROGRAM)
        assert refused.status == "error" and refused.error["ename"] == "ImportError", refused.error
        assert "import of 'string' is not allowed in restricted mode" in refused.error["evalue"]
        assert "[sandbox] allowed_imports" in refused.error["evalue"]  # the message says what to do
        assert refused.stdout == ""
        # A module of the default set is importable, so the refusal is about the list, not imports as such.
        assert box.execute("import textwrap\nprint(textwrap.dedent('  ok'))").stdout == "ok\n"
    with restricted_session(tmp_path / "listed", ["string"]) as box:
        allowed = box.execute(PROGRAM)
        assert allowed.status == "ok", allowed.error
        assert allowed.stdout == "Ada Lovelace abc\n"
        # Listing one module opens that one only.
        other = box.execute("import zlib")
        assert other.status == "error" and "import of 'zlib' is not allowed in restricted mode" in other.error["evalue"]
        # Restricted mode is still on in the listed session: its guards still refuse a dunder.
        guarded = box.execute("print(string.__dict__)")
        assert guarded.status in ("error", "rejected") and "__dict__" in str(guarded.error), guarded.error
