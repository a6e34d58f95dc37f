"""Restricted mode (RestrictedPython inside gVisor): SECURITY.md R1-R12, and the Northwind example unchanged.

gVisor is the boundary; restricted mode is defense in depth. Each R snippet must
fail, either refused by the host's compile check before the cell runs (status
`rejected`, nothing sent to the kernel) or stopped by a guard at run time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cellgate.kernel.restricted import check

pytestmark = pytest.mark.gvisor

ROOT = Path(__file__).resolve().parents[2]
NORTHWIND = ROOT / "examples" / "northwind"
COUNTED = ROOT / "tests" / "tools" / "counted.py"

ESCAPES = {
    "R1 subclasses walk": "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0](['id'])",
    "R2 generator frame walk": ("def g():\n    yield 1\ngen = g()\n"
                                "leak = getattr(getattr(getattr(gen, 'gi_frame'), 'f_back'), 'f_back')\n"
                                "imp = getattr(leak, 'f_builtins').get('__import__')"),
    "R3 format traversal": "'{0.__class__.__mro__[1]}'.format(1)",
    "R3 format_map traversal": "str.format_map('{a.__dict__}', {'a': str})",
    "R3 Formatter.get_field": "import string\nstring.Formatter().get_field('0.__class__', (1,), {})",
    "R3 format through a callable's globals": "import json\n'{0.__globals__[codecs]}'.format(json.dumps)",
    "R4 AttributeError.obj": "import datetime\ntry:\n    datetime.sys\nexcept AttributeError as e:\n    m = e.obj\n    m.modules['os']",
    "R5 try/except*": "try:\n    pass\nexcept* ValueError:\n    pass",
    "R6 guard shadowing, def": "def f(_getattr_=None, /): pass",
    "R6 guard shadowing, lambda": "f = lambda _getitem_, /: None",
    "R7 traceback frame walk": "try:\n    1/0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_back.f_globals",
    "R7 traceback via getattr": "try:\n    1/0\nexcept Exception as e:\n    getattr(getattr(e, 'with_traceback'), 'tb_frame')",
    "R7 sys._getframe": "import sys\nsys._getframe().f_builtins['__import__']('os')",
    "R8 random._os": "import random\nrandom._os.system(':')",
    "R8 module graph": "import json\njson.decoder.scanner.sys.modules['os']",
    "R8 indirect getattr": "import datetime\nlist(map(getattr, [datetime], ['sys']))[0].modules['os']",
    "R8 warnings.sys": "import warnings\nwarnings.sys",
    "R9 ctypes": "import ctypes",
    "R9 _ctypes": "import _ctypes",
    "R9 gc": "import gc\ngc.get_objects()",
    "R9 inspect": "import inspect",
    "R9 code": "import code",
    "R9 __import__": "__import__('o' + 's')",
    "R9 importlib": "import importlib\nimportlib.import_module('os')",
    "R9 breakpoint": "breakpoint()",
    "R10 __code__ swap": "def f(): pass\ndef g(): pass\nf.__code__ = g.__code__",
    "R10 augmented dunder": "x = ()\nx.__class__ += ()",
    "R10 setattr": "def f(): pass\ndef g(): pass\nsetattr(f, '__code__', g)",
    "R10 hasattr probe": "def f(): pass\nassert not hasattr(f, '__globals__')\nraise PermissionError('hasattr saw nothing')",
    "R11 getattr on builtins": "getattr(__builtins__, 'ev' + 'al')",
    "R11 fullwidth eval": "ｅｖａｌ('1')",
    "R11 exec of built text": "exec(bytes([111, 115]).decode())",
    "open a host file": "open('/etc/passwd').read()",
    "make a type": "type('X', (), {})",
}


@pytest.fixture(scope="module")
def restricted(session_factory):
    return session_factory(tools=[NORTHWIND / "tools.py"], restricted=True)


@pytest.mark.parametrize("snippet", list(ESCAPES.values()), ids=list(ESCAPES))
def test_escapes_are_refused(restricted, snippet: str) -> None:
    result = restricted.execute(snippet)
    assert result.status in ("rejected", "error"), result.text
    assert result.error["ename"] in ("RestrictedCompileError", "AttributeError", "ImportError", "NameError",
                                     "NotImplementedError", "PermissionError", "SyntaxError"), result.error
    assert restricted.execute("print('still usable')").stdout == "still usable\n"


def test_northwind_runs_unchanged(restricted) -> None:
    result = restricted.execute((NORTHWIND / "late_orders.py").read_text())
    assert result.ok and result.stdout == "10000 312\n"
    assert len(result.calls) == 313


def test_a_rejected_program_never_reaches_the_kernel_or_a_tool(session_factory, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    count = tmp_path / "count"
    monkeypatch.setenv("CELLGATE_TEST_COUNT_FILE", str(count))
    box = session_factory(tools=[COUNTED], restricted=True)
    result = box.execute("tools.charge(5)\nprint(().__class__)")
    assert result.status == "rejected" and result.calls == []
    assert "__class__" in result.error["evalue"] and result.limits_hit == ["restricted"]
    assert not count.exists()  # the charge on line 1 never ran: the whole program was refused
    assert box.execute("print(tools.charge(2))").stdout == "charged 2\n"
    assert count.read_text() == "2\n"


def test_R12_the_host_check_compiles_and_never_runs(capfd: pytest.CaptureFixture[str]) -> None:
    program = "@print('PWNED')\ndef f(x=print('PWNED2')): pass\nimport os\nos.system('echo PWNED3')"
    assert check(program) == []  # valid restricted Python: the verdict is the kernel's guards'
    assert check("().__class__") != []
    out, err = capfd.readouterr()
    assert "PWNED" not in out + err
    assert os.environ.get("PWNED") is None
